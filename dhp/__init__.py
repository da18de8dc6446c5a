"""DHP workbench: Discernment of Hierarchical Perturbation.

Data flows one way: dataset table -> perturbed table -> scores table -> statistics table -> figures.
See README.md for the schemas of each table.
"""

__version__ = "0.1.0"
