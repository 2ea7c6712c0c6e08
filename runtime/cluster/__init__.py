"""Deployment: the job manager in the driver and the barrier stage on Spark. Only this package imports pyspark."""
