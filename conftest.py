pytest_plugins = ["mnnvl_testbed.fixtures"]
