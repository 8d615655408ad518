# Copy to terraform.tfvars and set your project. Everything else has a default.
project_id = "my-spark-project"
# region             = "europe-west2"
# firestore_location = "europe-west2"
# model              = "gpt-4o-mini"
# limits             = { SPARK_MAX_STEPS = 8 }
