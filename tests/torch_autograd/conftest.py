from adapter import apply_dg_xfails


def pytest_configure(config):
    config.addinivalue_line("markers", "dg_xfail(reason): expected to fail on daskgrad, with the root cause")


def pytest_collection_modifyitems(config, items):
    apply_dg_xfails(items)
