"""Command-line plumbing shared by the GPU benchmarks (they themselves need CUDA and are run by hand)."""

import pytest

from lowprec.bench.common import parse_int_list, parse_names


def test_parse_names_keeps_order_and_names_the_unknown(capsys):
    assert parse_names("b", "--arms", " bf16,int8_block, ", ("bf16", "int8_block")) == ["bf16", "int8_block"]
    with pytest.raises(SystemExit) as e:
        parse_names("b", "--arms", "bf16,int9", ("bf16", "int8_block"))
    assert e.value.code == 2 and "--arms: unknown ['int9']" in capsys.readouterr().err


def test_parse_int_list_range(capsys):
    assert parse_int_list("b", "--sizes", "2048,4096", range(1, 9000)) == [2048, 4096]
    with pytest.raises(SystemExit):
        parse_int_list("b", "--sizes", "2048,x", None)
    assert "expected comma-separated integers" in capsys.readouterr().err
