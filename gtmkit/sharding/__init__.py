"""What both sharded builds share: the task runner in this process or on Dask (runner.py), the cluster's
connection and local start (cluster.py, worker_output.py), shard sizing (plan.py) and a task's output
folder (tasks.py)."""
