"""The pipeline steps, one module per kind of asset (its code version follows that module's imports)."""
