"""The backend library's path, for dkit's entry point (pyproject.toml). Kept apart from the
package's other modules so that giving the path imports nothing else of it."""

import os


def path():
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), "libdkit_myvendor.so")
