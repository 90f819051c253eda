"""Starting a quiet Spark session, and finding the Java it needs first."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from pyspark.sql import SparkSession

_JAVA_HINT = "install a JDK 17 (apt-get install -y openjdk-17-jre-headless) or set JAVA_HOME"
JAVA_MISSING = f"spark_analysis: Java not found; {_JAVA_HINT}"

# The driver JVM's logging when this process starts it: warnings and errors only, on
# stderr, minus the native-library notice every run on a plain Linux box prints.
_LOG4J2_PROPERTIES = """\
rootLogger.level = warn
rootLogger.appenderRef.stderr.ref = stderr
appender.stderr.type = Console
appender.stderr.name = stderr
appender.stderr.target = SYSTEM_ERR
appender.stderr.layout.type = PatternLayout
appender.stderr.layout.pattern = %d{HH:mm:ss} %p %c{1}: %m%n%ex
logger.native.name = org.apache.hadoop.util.NativeCodeLoader
logger.native.level = error
"""


def java_problem() -> str | None:
    """Why Spark could not start a JVM here, as one line, or None when Java is found.

    Mirrors Spark's launcher: `$JAVA_HOME/bin/java` when JAVA_HOME is set, else `java`
    on PATH.
    """
    java_home = os.environ.get("JAVA_HOME")
    if java_home:
        java = Path(java_home) / "bin" / "java"
        if java.is_file() and os.access(java, os.X_OK):
            return None
        return f"spark_analysis: JAVA_HOME={java_home} has no bin/java; {_JAVA_HINT}"
    return None if shutil.which("java") else JAVA_MISSING


@contextmanager
def spark_session(
    master: str | None = None, driver_host: str = "127.0.0.1"
) -> Iterator[SparkSession]:
    """A Spark session for the analysis.

    When this thread already has an active session (a notebook, a PySpark shell, a test
    run) it is reused as it is and left running. Otherwise a new session is started and
    stopped on exit: `master` None keeps the master spark-submit was given, else Spark's
    default `local[*]`; the driver binds to `driver_host` (also the default
    SPARK_LOCAL_IP of this process); the UI is off, shuffles use 4 partitions and
    logging is WARN and up. Call `java_problem()` first: without Java this raises
    whatever PySpark raises.
    """
    active = SparkSession.getActiveSession()
    if active is not None:
        yield active
        return
    os.environ.setdefault("SPARK_LOCAL_IP", driver_host)
    with tempfile.TemporaryDirectory(prefix="spark_analysis-") as scratch:
        log_config = Path(scratch) / "log4j2.properties"
        log_config.write_text(_LOG4J2_PROPERTIES, encoding="utf-8")
        builder = (
            SparkSession.builder.appName("spark_analysis")
            .config("spark.ui.enabled", "false")
            .config("spark.ui.showConsoleProgress", "false")
            .config("spark.sql.shuffle.partitions", "4")
            # A mistyped field nulls only itself, so load.py can tell bad_type apart.
            .config("spark.sql.json.enablePartialResults", "true")
            .config("spark.driver.host", driver_host)
            .config("spark.driver.bindAddress", driver_host)
            .config("spark.driver.extraJavaOptions", f"-Dlog4j2.configurationFile={log_config}")
        )
        if master is not None:
            builder = builder.master(master)
        spark = builder.getOrCreate()
        spark.sparkContext.setLogLevel("WARN")
        try:
            yield spark
        finally:
            spark.stop()
