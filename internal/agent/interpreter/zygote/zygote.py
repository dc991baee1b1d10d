"""Cubby's Python fork server ("zygote") for ipykernel.

Started once per sandbox by the Cubby agent as

    python3 zygote.py '<config json>'

with fd 0 a pipe from the agent (EOF = exit) and fd 3 a pipe on which one
ready line is written. The config is {"socket": path, "preload": [module...],
"late": [module...], "exclude": [module...]}. It imports ipykernel (required)
and the preload modules (best effort), with the "exclude" modules unimportable
meanwhile (ipykernel then runs without them, e.g. without debugpy), freezes the
garbage collector and serves a unix socket. The ready line reports how long
each import took ("import_ms"). Each connection carries one request line.
{"op": "preload"} starts importing the "late" modules, one at a time between
requests (so a fork never waits for more than one import), and is answered
{"ok": true, "import_ms": {module: ms}} once they are all imported. Any other
request, sent with the kernel's output fd attached (SCM_RIGHTS), is a fork:

    {"connection_file": path, "args": [ipykernel_launcher args...], "cwd": dir,
     "env": {name: value}, "uid": n|null, "gid": n|null, "groups": [n]|null}

The server forks; the child becomes a normal ipykernel (IPKernelApp) with its
own session, cwd, environment, output, random seeds and default signal
handlers. The reply line is {"pid": n} with a pidfd of the child attached, or
{"error": text}. The server reaps its children; the agent watches the pidfd.
"""

import gc
import json
import os
import signal
import socket
import sys
import time
import traceback

INLINE_BACKEND = "module://matplotlib_inline.backend_inline"
MAX_REQUEST = 16 << 20


def main():
    cfg = json.loads(sys.argv[1])
    del sys.path[0]  # python puts the script's directory first; kernels get their cwd
    start_env = dict(os.environ)
    handlers = {s: signal.getsignal(s) for s in signal.valid_signals() if _catchable(s)}
    ready = os.fdopen(3, "w")
    os.environ.setdefault("MPLBACKEND", INLINE_BACKEND)
    timings = {}
    with Excluded(cfg.get("exclude") or []):
        try:
            os.close(os.pidfd_open(os.getpid()))  # the agent watches kernels through pidfds
            timed_import("ipykernel.kernelapp", timings)
        except Exception as e:  # noqa: BLE001 (reported to the agent)
            ready.write(json.dumps({"error": "%s: %s" % (type(e).__name__, e)}) + "\n")
            ready.close()
            sys.exit(2)
        loaded, failed = preload(cfg.get("preload") or [], timings)
    server = Server(cfg["socket"], handlers, start_env, cfg.get("late") or [])
    gc.freeze()  # no gc.collect() first: imports leave next to no garbage and it costs ~35 ms here
    ready.write(json.dumps({"ready": True, "pid": os.getpid(), "preloaded": loaded, "failed": failed,
                            "import_ms": timings}) + "\n")
    ready.close()
    server.serve()


def _catchable(sig):
    return sig not in (signal.SIGKILL, signal.SIGSTOP)


def timed_import(name, timings):
    t0 = time.perf_counter()
    try:
        __import__(name)
    finally:
        timings[name] = round((time.perf_counter() - t0) * 1e3, 1)


def preload(modules, timings):
    loaded, failed = [], {}
    for name in modules:
        try:
            timed_import(name, timings)
            loaded.append(name)
        except Exception as e:  # noqa: BLE001 (optional modules)
            failed[name] = "%s: %s" % (type(e).__name__, e)
    return loaded, failed


class Excluded:
    """Makes some top-level modules unimportable (ModuleNotFoundError) inside
    a with block, so that optional imports of ipykernel fall back; afterwards
    they import normally again."""

    def __init__(self, names):
        self.names = set(names)

    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in self.names:
            raise ModuleNotFoundError("No module named %r (excluded by the fork server)" % name, name=name)
        return None

    def __enter__(self):
        if self.names:
            sys.meta_path.insert(0, self)
        return self

    def __exit__(self, *exc):
        if self in sys.meta_path:
            sys.meta_path.remove(self)
        return False


class Server:
    def __init__(self, path, handlers, start_env, late):
        self.handlers = handlers
        self.late = list(late)  # imported after {"op": "preload"}
        self.late_started = False
        self.late_ms = {}
        self.waiters = []  # connections of preload requests, answered when self.late is done
        self.base_pythonpath = _pythonpath(os.environ.get("PYTHONPATH", ""))
        self.backend = os.environ.get("MPLBACKEND")
        # Variables that imports set (debugpy: PYDEVD_USE_FRAME_EVAL); a cold
        # kernel would set them too, so children get them unless their env has them.
        self.import_env = {k: v for k, v in os.environ.items() if start_env.get(k) != v and k != "MPLBACKEND"}
        # Python's C-locale coercion (PEP 538) exports LC_CTYPE at start-up.
        self.coerced_ctype = os.environ.get("LC_CTYPE")
        self.launcher = _launcher_path()
        old = os.umask(0o077)
        try:
            self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            self.listener.bind(path)
        finally:
            os.umask(old)
        self.listener.listen(64)
        self.wake_r, self.wake_w = os.pipe()
        os.set_blocking(self.wake_w, False)
        signal.set_wakeup_fd(self.wake_w)
        signal.signal(signal.SIGCHLD, lambda *_: None)
        signal.signal(signal.SIGINT, signal.SIG_IGN)

    def serve(self):
        import select

        poller = select.poll()
        for fd in (0, self.wake_r, self.listener.fileno()):
            poller.register(fd, select.POLLIN)
        while True:
            pending = self.late_started and self.late
            events = poller.poll(0 if pending else None)
            if not events and pending:
                self.import_late()
                continue
            for fd, _ in events:
                if fd == 0 and not os.read(0, 4096):
                    return  # the agent closed our stdin (or died)
                if fd == self.wake_r:
                    os.read(self.wake_r, 4096)
                    self.reap()
                if fd == self.listener.fileno():
                    conn, _ = self.listener.accept()
                    if not self.handle(conn):
                        conn.close()

    def import_late(self):
        name = self.late.pop(0)
        _, failed = preload([name], self.late_ms)
        print("late preload %s: %s ms%s" % (name, self.late_ms.get(name), (" (failed: %s)" % failed[name]) if failed else ""),
              file=sys.stderr, flush=True)
        if not self.late:
            gc.collect()
            gc.freeze()  # the newly imported objects too: kernels share their pages
            self.answer_waiters()

    def answer_waiters(self):
        for c in self.waiters:
            try:
                c.sendall(_line({"ok": True, "import_ms": self.late_ms}))
            except OSError:
                pass
            c.close()
        self.waiters = []

    def reap(self):
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            print("kernel %d exited: %s" % (pid, _status(status)), file=sys.stderr, flush=True)

    def handle(self, conn):
        """Serves one request; True when conn was kept to be answered later."""
        conn.settimeout(10)
        fds = []
        try:
            req, fds = _read_request(conn)
            if req.get("op") == "preload":
                self.late_started = True
                self.waiters.append(conn)
                if not self.late:
                    self.answer_waiters()
                return True
            self.check(req)
            pid = self.fork(req, fds[0] if fds else -1, conn)
            try:
                pidfd = os.pidfd_open(pid)  # before any reaping: pid cannot be reused yet
                try:
                    socket.send_fds(conn, [_line({"pid": pid})], [pidfd])
                finally:
                    os.close(pidfd)
            except BaseException:
                os.kill(pid, signal.SIGKILL)  # nobody would ever talk to it
                raise
        except Exception as e:  # noqa: BLE001 (reported to the agent)
            try:
                conn.sendall(_line({"error": "%s: %s" % (type(e).__name__, e)}))
            except OSError:
                pass
        finally:
            for fd in fds:
                os.close(fd)
        return False

    def check(self, req):
        uid = req.get("uid")
        if uid is not None and uid != os.getuid() and os.geteuid() != 0:
            raise PermissionError("fork server runs as uid %d and cannot switch to uid %d" % (os.getuid(), uid))
        if not isinstance(req.get("args"), list) or not req.get("connection_file"):
            raise ValueError("request needs connection_file and args")

    def fork(self, req, outfd, conn):
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            Child(self, req, outfd, conn).run()  # never returns
        return pid


class Child:
    """Turns a freshly forked process into an ipykernel."""

    def __init__(self, server, req, outfd, conn):
        self.server, self.req, self.outfd, self.conn = server, req, outfd, conn

    def run(self):
        code = 1
        try:
            self.detach()
            self.become()
            code = self.launch()
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        except BaseException:  # noqa: BLE001 (the child must never return)
            traceback.print_exc()
        finally:
            _exit(code)

    def detach(self):
        """Own session, own stdio, none of the server's fds or handlers."""
        os.setsid()
        srv = self.server
        signal.set_wakeup_fd(-1)
        for sig, h in srv.handlers.items():
            try:
                signal.signal(sig, h if h is not None else signal.SIG_DFL)
            except (OSError, ValueError, TypeError):
                pass
        signal.pthread_sigmask(signal.SIG_SETMASK, [])
        self.conn.close()
        for c in srv.waiters:
            c.close()
        srv.listener.close()
        os.close(srv.wake_r)
        os.close(srv.wake_w)
        null = os.open(os.devnull, os.O_RDWR)
        os.dup2(null, 0)
        out = self.outfd if self.outfd >= 0 else null
        os.dup2(out, 1)
        os.dup2(out, 2)
        os.close(null)
        if self.outfd >= 0:
            os.close(self.outfd)

    def become(self):
        """Identity, cwd, environment, import path and random state."""
        req = self.req
        uid, gid = req.get("uid"), req.get("gid")
        same = uid == os.getuid() == os.geteuid() and (gid is None or gid == os.getgid())
        if uid is not None and not same:
            if req.get("groups") is not None:
                os.setgroups(req["groups"])
            if gid is not None:
                os.setgid(gid)
            os.setuid(uid)
        if req.get("cwd"):
            os.chdir(req["cwd"])
        env = req.get("env")
        if env is not None:
            self.set_env(env)
        self.fix_path()
        self.fix_matplotlib()
        reseed()
        import tempfile

        tempfile.tempdir = None
        gc.enable()

    def set_env(self, env):
        env = dict(env)
        for k, v in self.server.import_env.items():
            env.setdefault(k, v)
        locale_set = any(env.get(k) for k in ("LC_ALL", "LC_CTYPE", "LANG"))
        if not locale_set and self.server.coerced_ctype:
            env["LC_CTYPE"] = self.server.coerced_ctype
        os.environ.clear()
        os.environ.update(env)

    def fix_path(self):
        """sys.path as `python -m ipykernel_launcher` in cwd with this PYTHONPATH has it."""
        import importlib

        for p in self.server.base_pythonpath:
            while p in sys.path:
                sys.path.remove(p)
        sys.path[0:0] = [os.getcwd()] + _pythonpath(os.environ.get("PYTHONPATH", ""))
        importlib.invalidate_caches()

    def fix_matplotlib(self):
        mpl = sys.modules.get("matplotlib")
        want = os.environ.get("MPLBACKEND") or INLINE_BACKEND
        if mpl is not None and want != self.server.backend:
            try:
                mpl.rcParams["backend"] = want
            except Exception:  # noqa: BLE001 (an invalid backend fails like in a cold kernel later)
                pass

    def launch(self):
        from ipykernel.kernelapp import IPKernelApp

        args = [str(a) for a in self.req["args"]]
        if "-f" not in args and not any(a.startswith("--f=") or a.startswith("--IPKernelApp.connection_file=") for a in args):
            args = ["-f", self.req["connection_file"]] + args
        sys.argv = [self.server.launcher] + args
        IPKernelApp.launch_instance(argv=args)
        return 0


def reseed():
    """Fresh random streams: forked children would otherwise share them."""
    import random

    random.seed()
    np = sys.modules.get("numpy")
    if np is not None:
        try:
            np.random.seed()
        except Exception:  # noqa: BLE001 (numpy without a usable global RNG)
            pass
    mp = sys.modules.get("multiprocessing.process")
    if mp is not None:
        mp.current_process().authkey = os.urandom(32)


def _exit(code):
    import atexit

    try:
        atexit._run_exitfuncs()
    except BaseException:  # noqa: BLE001
        pass
    for f in (sys.stdout, sys.stderr):
        try:
            f.flush()
        except BaseException:  # noqa: BLE001
            pass
    os._exit(code if isinstance(code, int) else 1)


def _launcher_path():
    """sys.argv[0] of `python -m ipykernel_launcher`: the module's file."""
    import importlib.util

    try:
        return importlib.util.find_spec("ipykernel_launcher").origin
    except Exception:  # noqa: BLE001
        return "ipykernel_launcher"


def _pythonpath(value):
    return [os.path.abspath(p) for p in value.split(os.pathsep) if p]


def _read_request(conn):
    buf, fds = b"", []
    while not buf.endswith(b"\n"):
        data, got, _, _ = socket.recv_fds(conn, 1 << 16, 4)
        fds.extend(got)
        if not data:
            raise EOFError("connection closed before the request ended")
        buf += data
        if len(buf) > MAX_REQUEST:
            raise ValueError("request too large")
    return json.loads(buf), fds


def _line(obj):
    return (json.dumps(obj) + "\n").encode()


def _status(status):
    if os.WIFSIGNALED(status):
        return "signal %d" % os.WTERMSIG(status)
    return "exit status %d" % os.waitstatus_to_exitcode(status)


if __name__ == "__main__":
    main()
