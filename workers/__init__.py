"""The arq side of majordomus: the worker, the job that runs one execution, the sweeper."""
