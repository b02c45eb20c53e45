"""Which dkit the benchmarks import: the checkout's, where it is built for the running Python
(`make python` builds it in place), and otherwise the installed one (`pip install .`). With
DKIT_IMPORT_INSTALLED=1 always the installed one: the test suite sets it when it tests an
installed copy (`make test-installed`), so that no script it starts reads the checkout instead.

    from _dkit_path import ROOT, use_checkout, child_env
    use_checkout()                                       # before `import dkit`
    subprocess.run([...], env=child_env())               # children import the same dkit
"""

import os
import sys
import sysconfig

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _checkout():
    if os.environ.get("DKIT_IMPORT_INSTALLED") == "1":
        return None
    ext = os.path.join(ROOT, "dkit", "_C" + sysconfig.get_config_var("EXT_SUFFIX"))
    return ROOT if os.path.isfile(ext) else None


CHECKOUT = _checkout()


def use_checkout():
    """Puts the checkout first on sys.path when its dkit is built for this Python."""
    if CHECKOUT is not None and CHECKOUT not in sys.path:
        sys.path.insert(0, CHECKOUT)


def child_env(env=None):
    """A copy of `env` (os.environ by default) whose PYTHONPATH leads child processes to the same
    dkit as this one."""
    env = dict(os.environ if env is None else env)
    if CHECKOUT is not None:
        env["PYTHONPATH"] = CHECKOUT + os.pathsep + env.get("PYTHONPATH", "")
    return env
