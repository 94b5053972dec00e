"""What a job is and what one step does with a batch: features, the checked batch, the dense model and its TF step,
the job spec, a worker's input stream, evaluation metrics and the model digest. Knows no servers."""
