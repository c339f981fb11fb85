"""What the Spark Estimators share: the Store of data, checkpoints and logs
(:mod:`gcurun.spark.common.store`), their Params, the DataFrame's materialisation to Parquet
and its reading by rank, and the backend that runs the ranks."""
