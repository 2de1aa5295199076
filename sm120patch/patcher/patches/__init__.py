"""The patches, one module each; ``plan.registry`` finds them."""
