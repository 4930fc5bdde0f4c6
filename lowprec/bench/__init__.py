"""Benchmark scripts; each writes its results with provenance under results/."""
