"""The job API: Job and Cluster, a run in this process (LocalRun), the trained model (prediction, evaluation, export
to a SavedModel) and where a job comes from (a script or a factory)."""
