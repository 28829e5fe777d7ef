"""The stages: each module runs one stage of synedre/pipeline.py through the stage runner (synedre/runner/)."""
