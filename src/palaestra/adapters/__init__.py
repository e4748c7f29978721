"""Adapters to other libraries' environments and formats: OpenEnv, verifiers, Aviary,
Harbor task directories and NeMo Gym rollouts.

Nothing is imported here: each adapter imports its library lazily, inside the functions that need it,
so ``import palaestra`` never pays for (or requires) an optional dependency."""
