"""Benchmarks: `python -m bench` (make bench) writes bench/results.json and results.md.

Every figure is printed beside what it was measured against in the same run;
nothing here asserts a timing.
"""
