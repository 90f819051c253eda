"""PySpark analysis of benchmark traces (trace schema v1, docs/TRACES.md) into a report.

Run it as `python -m spark_analysis RUN_DIR [RUN_DIR ...]` or
`spark-submit spark_analysis/__main__.py RUN_DIR ...`; see `spark_analysis.cli`.
"""
