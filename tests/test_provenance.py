"""Provenance of a staged copy of the tree (no .git, or a stale one): it names its commit through the environment."""

from lowprec import provenance


def test_environment_names_the_commit_of_a_staged_copy(monkeypatch):
    monkeypatch.setattr(provenance, "_git", lambda *a: "f" * 40)  # a stale .git travelled with the copy
    monkeypatch.setenv("LOWPREC_GIT_COMMIT", "abc123")
    monkeypatch.setenv("LOWPREC_GIT_DIRTY", "0")
    assert provenance.git_commit() == "abc123" and provenance.git_dirty() is False
    monkeypatch.setenv("LOWPREC_GIT_DIRTY", "yes")  # not 0/1: fall back to git's answer
    assert provenance.git_dirty() is True


def test_without_git_or_environment_nothing_is_guessed(monkeypatch):
    monkeypatch.setattr(provenance, "_git", lambda *a: None)
    monkeypatch.delenv("LOWPREC_GIT_COMMIT", raising=False)
    monkeypatch.delenv("LOWPREC_GIT_DIRTY", raising=False)
    assert provenance.git_commit() is None and provenance.git_dirty() is None
