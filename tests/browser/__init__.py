# A package, so that this directory's conftest.py is imported as browser.conftest and does not
# replace tests/conftest.py as the `conftest` module the other test files import `edit` from.
