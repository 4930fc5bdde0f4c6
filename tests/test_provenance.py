"""Provenance outside a git checkout: a staged copy of the tree names its commit through the environment."""

from lowprec import provenance


def test_checkout_reports_its_own_commit(monkeypatch):
    monkeypatch.setenv("LOWPREC_GIT_COMMIT", "0" * 40)
    head = provenance._git("rev-parse", "HEAD")
    if head is None:  # the test itself runs from a copy without .git
        assert provenance.git_commit() == "0" * 40
    else:
        assert provenance.git_commit() == head  # git wins over the variable


def test_copy_without_git_reads_the_environment(monkeypatch):
    monkeypatch.setattr(provenance, "_git", lambda *a: None)
    monkeypatch.delenv("LOWPREC_GIT_COMMIT", raising=False)
    monkeypatch.delenv("LOWPREC_GIT_DIRTY", raising=False)
    assert provenance.git_commit() is None and provenance.git_dirty() is None
    monkeypatch.setenv("LOWPREC_GIT_COMMIT", "abc123")
    monkeypatch.setenv("LOWPREC_GIT_DIRTY", "0")
    assert provenance.git_commit() == "abc123" and provenance.git_dirty() is False
    monkeypatch.setenv("LOWPREC_GIT_DIRTY", "yes")  # not 0/1: unknown rather than a guess
    assert provenance.git_dirty() is None
