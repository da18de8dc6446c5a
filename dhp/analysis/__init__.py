"""Analyses: the statistics of each meta-evaluation method, pure — tables in, tables out (no model calls, no file
I/O, no plotting; tests/test_import_contracts.py holds the line). One module per method: discernment (DHP),
confusion (criteria confusion), decomposition (decompose and aggregate), dual_perspective, alignment (human
alignment); report_card builds the card's rows. The methods (dhp.methods) call them in their ``analyze`` and
``card`` stages; every function handles tables of several judges (judge and mode are columns).
"""
