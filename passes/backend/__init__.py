"""Backend passes: hbsm-allocate, twu-materialize, sync-insert."""
