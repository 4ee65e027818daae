"""Stand-ins for Flower, NVIDIA FLARE and OpenFL.

None of the three frameworks installs on the test machines, so the adapters in
``tensorpress.integrations`` are tested against these modules. Each one copies
the signatures and the behaviour the adapters rely on from a named source file
of the framework (quoted in its docstring); nothing else of the framework is
reproduced. ``conftest.py`` registers them in ``sys.modules`` under the real
module names, so the adapters' production imports run unchanged.
"""
