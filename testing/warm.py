"""Warm-started brokers for tests: forked from a parent that has already imported them.

A test broker spends almost all of its start-up in the interpreter and its imports (~125 ms on
a small machine; the broker's own start after them is ~10 ms). A :class:`WarmStarter` pays that
once per test session: it runs one *warm parent*, a Python process that imports trio and every
module ``minikafka serve`` uses (handlers and codecs included), then waits — one thread, no
event loop, no open files but its request socket. Each broker is forked from it and runs
``minikafka``'s own command line (``cli.main``) with its own arguments, environment, working
directory, stdout and stderr, exactly as a spawned ``minikafka serve`` would: its own process id,
port, log dir and config; its random generators re-seeded; nothing shared with the parent but
the read-only pages of its imports.

The broker is made a child of the *test process*, not of the warm parent: the warm parent forks
twice and the test process is a child subreaper (Linux's ``PR_SET_CHILD_SUBREAPER``), so the
orphaned broker is re-parented to it. The test process then waits for it, signals it and reads
its exit status as for any child (:class:`ForkedProcess` has ``Popen``'s interface), and killing
the warm parent never touches a running broker.

The parent keeps one broker process forked ahead (a *spare*), which a start request turns into
the broker at once: the parent hands the test process the spare's pid and its end of the
spare's socket, and the request goes straight to the spare. The next spare is forked when the
test process is done with a broker
(:meth:`WarmStarter.fork_ahead`, which a broker's stop calls), or on demand when a start finds
none (a test's second broker, a cluster's). Not right after a start: on two cores the fork and
the new spare's page copying beside a broker's first requests made them some 5 ms slower.

Where that cannot work (no ``fork``, not Linux, a parent that would not start), ``start``
returns None and the caller spawns the process instead; ``MINIKAFKA_WARM_START=0`` turns warm
starts off.
"""

from __future__ import annotations

import array
import ctypes
import errno
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time

logger = logging.getLogger(__name__)

ENV_SWITCH = "MINIKAFKA_WARM_START"
# For minikafka's own isolation tests: a forked broker writes its first random numbers (Python's
# and trio's) to this file before it starts.
PROBE_ENV = "MINIKAFKA_WARM_PROBE"
PR_SET_CHILD_SUBREAPER = 36
# The test process's one message to the parent: fork a spare and hand it over.
FORK_AHEAD = b"fork"
_MAX_REQUEST = 1 << 20


class ForkedProcess:
    """A forked broker, re-parented to this process: ``subprocess.Popen``'s waiting and
    signalling interface over its process id."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            try:
                pid, status = os.waitpid(self.pid, os.WNOHANG)
            except ChildProcessError:  # reaped elsewhere: gone, status unknown
                self.returncode = -signal.SIGKILL
                return self.returncode
            if pid:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        delay = 0.0005
        while self.poll() is None:
            if deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(f"pid {self.pid}", timeout)
            time.sleep(delay)
            delay = min(delay * 2, 0.002)  # a broker's clean stop takes ~30 ms: look often
        return self.returncode

    def send_signal(self, signum: int) -> None:
        if self.poll() is None:
            os.kill(self.pid, signum)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


class WarmStarter:
    """The session's warm parent, started on first use; ``start(...)`` forks a broker from it."""

    def __init__(self) -> None:
        self._process: subprocess.Popen | None = None
        self._socket: socket.socket | None = None
        # The spare the parent forked ahead, waiting for a request on its link: (pid, our end of
        # the link); None until the parent's message that hands it over is read.
        self._spare: tuple[int, socket.socket] | None = None
        # The parent forks a spare (asked for, or the first one) whose message is still unread.
        self._spare_coming = False
        # One request and its answer at a time: a cluster's brokers are started from threads.
        self._lock = threading.Lock()
        self._unavailable: str | None = None
        if os.environ.get(ENV_SWITCH) == "0":
            self._unavailable = f"{ENV_SWITCH}=0"
        elif not _supported():
            self._give_up("this platform cannot fork brokers (Linux only)")

    @property
    def unavailable(self) -> str | None:
        """Why brokers are spawned instead (None while warm starts work)."""
        return self._unavailable

    def start(self, argv: list[str], *, cwd: str, env: dict[str, str], stdout: int, stderr: int) -> ForkedProcess | None:
        """Fork ``minikafka`` with ``argv`` (its arguments, as ``main`` takes them) and these
        stdout/stderr file descriptors; None if warm starts are unavailable (see ``unavailable``)."""
        with self._lock:
            if self._unavailable is not None:
                return None
            try:
                if self._socket is None:
                    self._launch()
                if self._spare is None:
                    if not self._spare_coming:
                        _send_message(self._socket, FORK_AHEAD)
                    self._spare = _receive_spare(self._socket)
                    self._spare_coming = False
                broker, link = self._spare
                request = json.dumps({"argv": argv, "cwd": cwd, "env": env}).encode()
                _send_message(link, request, [stdout, stderr])
                link.close()
                self._spare = None
                return ForkedProcess(broker)
            except OSError as exc:
                self._give_up(f"the warm parent failed ({exc})")
                return None

    def fork_ahead(self) -> None:
        """Have the next broker's spare forked now, if there is none (a test is done with a
        broker: nothing is timed), rather than at the next start."""
        with self._lock:
            if self._socket is None or self._spare is not None or self._spare_coming:
                return
            try:
                _send_message(self._socket, FORK_AHEAD)
                self._spare_coming = True
            except OSError as exc:
                self._give_up(f"the warm parent failed ({exc})")

    def _launch(self) -> None:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_SET_CHILD_SUBREAPER)")
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        with theirs:
            self._process = subprocess.Popen(
                [sys.executable, "-c", f"from minikafka.testing.warm import _serve; _serve({theirs.fileno()})"],
                pass_fds=[theirs.fileno()], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                env=dict(os.environ, PYTHONUNBUFFERED="1"))
        self._socket = ours
        # The parent says it is ready (its imports done) with one byte, then hands its first spare over.
        if _receive_exactly(ours, 1) != b"R":
            raise OSError("the warm parent did not start")
        self._spare_coming = True

    def _give_up(self, why: str) -> None:
        self._unavailable = why
        logger.warning("minikafka: warm start unavailable, spawning brokers instead: %s", why)
        self.close()

    def close(self) -> None:
        if self._socket is not None:
            if self._spare_coming:  # written already, unless the parent died before forking it
                self._socket.settimeout(1.0)
                try:
                    self._spare = _receive_spare(self._socket)
                except OSError:
                    pass
            self._socket.close()
            self._socket = None
        if self._process is not None:
            self._process.kill()
            self._process.wait()
            self._process = None
        if self._spare:
            # Our child (re-parented, as every broker): it exits on its link closing; kill it
            # anyway, and reap it.
            pid, link = self._spare
            link.close()
            ForkedProcess(pid).kill()
            ForkedProcess(pid).wait(5)
        self._spare = None
        self._spare_coming = False


def _supported() -> bool:
    return sys.platform.startswith("linux") and hasattr(os, "fork")


def _receive_spare(sock: socket.socket) -> tuple[int, socket.socket]:
    """The spare the parent hands over: its pid and the test process's end of its link."""
    message = _receive_message(sock)
    if message is None:
        raise ConnectionError("the warm parent closed its socket")
    pid, descriptors = int.from_bytes(message[0], "big"), message[1]
    if pid == 0 or len(descriptors) != 1:
        for descriptor in descriptors:
            os.close(descriptor)
        raise OSError("the warm parent could not fork a spare broker")
    return pid, socket.socket(fileno=descriptors[0])


def _send_message(sock: socket.socket, message: bytes, descriptors: list[int] = ()) -> None:
    """A length-prefixed message, with the descriptors (if any) riding on its first bytes."""
    ancillary = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", descriptors))] if descriptors else []
    sock.sendmsg([len(message).to_bytes(4, "big") + message], ancillary)


def _receive_message(sock: socket.socket) -> tuple[bytes, list[int]] | None:
    """The message ``_send_message`` sent and its descriptors (a start request's are its stdout
    and stderr); None at end of stream."""
    message, ancillary, _, _ = sock.recvmsg(_MAX_REQUEST, socket.CMSG_SPACE(2 * array.array("i").itemsize))
    if not message:
        return None
    while len(message) < 4:
        message += _receive_exactly(sock, 4 - len(message))
    size = int.from_bytes(message[:4], "big")
    if size > _MAX_REQUEST:
        raise SystemExit("the warm parent got an oversized request")
    message = message[4:]
    while len(message) < size:
        message += _receive_exactly(sock, size - len(message))
    return message, _descriptors(ancillary)


def _receive_exactly(sock: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise ConnectionError("the warm parent closed its socket")
        data += chunk
    return data


# ---------------------------------------------------------------------------- the warm parent


def _warm_up() -> None:
    """Import what ``minikafka serve`` imports by its first answers, and compile every codec
    it uses (request readers, response writers), so a forked broker finds them done."""
    import encodings.idna  # noqa: F401 - the first getaddrinfo of a host name imports it
    import trio  # noqa: F401

    import minikafka.broker.cli  # noqa: F401
    import minikafka.broker.config  # noqa: F401
    import minikafka.broker.connection  # noqa: F401
    import minikafka.broker.control  # noqa: F401
    import minikafka.broker.fault_injection  # noqa: F401
    import minikafka.broker.server  # noqa: F401
    import minikafka.replication.cluster  # noqa: F401 - cluster brokers
    try:
        import kazoo.client  # noqa: F401 - ~150 ms a cluster broker would pay; importing starts no thread
        import kazoo.exceptions  # noqa: F401
    except ImportError:
        pass
    from minikafka.broker import handlers
    from minikafka.protocol.apis import APIS

    for api_key in list(handlers.HANDLERS):
        handlers.load(api_key)
    for api in APIS.values():
        for version in range(api.min_version, api.max_version + 1):
            api.request(version).read  # noqa: B018 - compiled on first access
            api.response(version).write  # noqa: B018


def _serve(fd: int) -> None:
    """The warm parent's loop. It keeps one broker forked ahead (a *spare*, as Android's zygote
    keeps unspecialised app processes), handed to the test process, whose request makes it that
    broker at once; the next spare is forked when the test process asks (``FORK_AHEAD``). The
    fork and the copy-on-write faults of a fresh child are off a test's first broker's start-up
    that way."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the test run's Ctrl-C is for the test process
    _warm_up()
    import gc

    gc.collect()
    gc.freeze()  # children never walk what the parent made (as serve does at its ready line)
    control = socket.socket(fileno=fd)
    control.sendall(b"R")
    message = FORK_AHEAD, []  # the first spare, for the first broker
    # Ends when the test process is gone; a spare it holds sees its link close and exits.
    while message is not None:
        request, descriptors = message
        for descriptor in descriptors:
            os.close(descriptor)
        if request != FORK_AHEAD:
            raise SystemExit("the warm parent only forks spares; start requests go to them")
        spare_pid, spare_link = _fork_spare(control)
        try:
            _send_message(control, spare_pid.to_bytes(4, "big"), [spare_link.fileno()] if spare_pid else [])
        except (BrokenPipeError, ConnectionResetError):  # it left while this spare was forked
            return
        finally:
            spare_link.close()
        try:
            message = _receive_message(control)
        except ConnectionResetError:
            message = None


def _descriptors(ancillary) -> list[int]:
    fds = array.array("i")
    for level, kind, data in ancillary:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.frombytes(data[: len(data) - (len(data) % fds.itemsize)])
    return list(fds)


def _fork_spare(control: socket.socket) -> tuple[int, socket.socket]:
    """Fork a spare broker, re-parented to the test process: an intermediate child forks it and
    exits at once, so the spare is an orphan and the test process (a child subreaper) adopts it.
    Returns the spare's pid (0 if the fork failed) and the other end of its link."""
    if threading.active_count() != 1:
        raise SystemExit("the warm parent must fork from a single thread")
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    read_end, write_end = os.pipe()
    intermediate = os.fork()
    if intermediate == 0:
        try:
            os.close(read_end)
            spare = os.fork()
            if spare == 0:
                os.close(write_end)
                control.close()
                ours.close()
                _wait_as_spare(theirs)
            os.write(write_end, spare.to_bytes(4, "big"))
        finally:
            os._exit(0)
    os.close(write_end)
    theirs.close()
    data = b""
    while len(data) < 4:
        chunk = os.read(read_end, 4 - len(data))
        if not chunk:
            break
        data += chunk
    os.close(read_end)
    os.waitpid(intermediate, 0)
    return (int.from_bytes(data, "big") if len(data) == 4 else 0), ours


def _wait_as_spare(link: socket.socket) -> None:
    """In a spare: copy the written pages in the background, wait for the request that makes
    this process a broker; never returns."""
    try:
        copier = _PageCopier()
        try:
            request = _receive_message(link)
        finally:
            copier.stop()
    except BaseException:  # noqa: BLE001 - a broken link: no broker to be
        os._exit(1)
    if request is None:
        os._exit(0)  # the warm parent is gone
    link.close()
    message, (stdout, stderr) = request
    _become_broker(json.loads(message), stdout, stderr)


MADV_POPULATE_WRITE = 23  # Linux 5.14+
# Pages copied per madvise call: small enough that a stop is seen within some 20 us of CPU
# (as long again for the copier's thread to end when the spare is wanted), large enough that
# the calls cost nothing beside the copying.
_COPY_CHUNK = 64 << 10


class _PageCopier:
    """Take every copy-on-write fault of this spare's private writable memory ahead of its
    request, in a thread of the lowest priority that stops when the request comes.

    A forked Python shares its parent's heap until it writes to it, and it writes nearly
    everywhere it reads (reference counts): a broker's first request to ready otherwise pays a
    page fault and a 4 KiB copy for each heap page it touches (measured, CPU of the main thread
    from the request to the ready line: 7.3 ms without the copy, 3.1 ms with it).
    ``MADV_POPULATE_WRITE`` breaks the sharing of a range without writing a byte, so it is safe
    beside the interpreter's own use of that memory. Copying all of it costs ~12 ms of CPU,
    which the spare spends just after its fork, while the broker before it shuts down: at nice
    19 it takes only what CPU nobody else wants (run at the default priority beside a broker's
    first requests it added ~7 ms to its first produced and consumed message). A request
    that comes before the copy is done stops it; the broker then takes the remaining faults as
    it goes. The price is memory: a spare holds a private copy of the whole heap (tens of MB)
    instead of the part a broker would have touched. Kernels without it (before 5.14) refuse
    with EINVAL; then the faults are taken as before, one at a time.
    """

    def __init__(self) -> None:
        self._stopping = threading.Event()
        # Read before the thread starts, so its own stack is not among them.
        ranges = _private_writable_ranges()
        self._thread = threading.Thread(target=self._copy, args=(ranges,), name="minikafka spare page copy",
                                        daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop copying and return once the copier's thread is gone: the broker starts with one."""
        self._stopping.set()
        self._thread.join()
        # join() returns as the thread's Python state is released, a moment before the kernel
        # lets the thread go.
        while threading.active_count() > 1 or _kernel_threads() > 1:
            time.sleep(0.00005)

    def _copy(self, ranges: list[tuple[int, int]]) -> None:
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 19)  # this thread only
        _copy_written_pages(ranges, self._stopping)


def _private_writable_ranges() -> list[tuple[int, int]]:
    """The heap, pymalloc's arenas, the data of the loaded libraries: every private writable
    mapping, never a shared one (a write would reach the file) or a special one."""
    try:
        with open("/proc/self/maps") as maps:
            lines = maps.readlines()
    except OSError:
        return []
    ranges = []
    for line in lines:
        fields = line.split()
        if len(fields) < 2 or fields[1] != "rw-p" or (len(fields) >= 6 and fields[5].startswith("[v")):
            continue
        start, end = (int(part, 16) for part in fields[0].split("-"))
        ranges.append((start, end))
    return ranges


def _copy_written_pages(ranges: list[tuple[int, int]], stopping: threading.Event) -> None:
    """MADV_POPULATE_WRITE over ``ranges``, a chunk at a time, until done or ``stopping`` is set."""
    madvise = ctypes.CDLL(None, use_errno=True).madvise
    madvise.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
    for start, end in ranges:
        for chunk in range(start, end, _COPY_CHUNK):
            if stopping.is_set():
                return
            if madvise(chunk, min(_COPY_CHUNK, end - chunk), MADV_POPULATE_WRITE) != 0 \
                    and ctypes.get_errno() == errno.EINVAL:
                return


def _kernel_threads() -> int:
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:  # no procfs: threading's count is all there is
        return 1


def _become_broker(request: dict, stdout: int, stderr: int) -> None:
    """In the forked broker: its own descriptors, environment, directory and randomness, then
    the command line; never returns."""
    code = 1
    try:
        devnull = os.open(os.devnull, os.O_RDONLY)
        os.dup2(devnull, 0)
        os.dup2(stdout, 1)
        os.dup2(stderr, 2)
        for fd in (devnull, stdout, stderr):
            os.close(fd)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        _take_environment(request["env"])
        os.chdir(request["cwd"])
        from minikafka.protocol.records import use_native_as_the_environment_says

        use_native_as_the_environment_says()  # chosen at the parent's import, from its environment
        _reseed()
        if PROBE_ENV in os.environ:
            _write_probe(os.environ[PROBE_ENV])
        from minikafka.broker.cli import main

        try:
            code = main(request["argv"])
        except SystemExit as exc:  # argparse's refusals
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException:  # noqa: BLE001 - reported as a spawned interpreter would
        import traceback

        traceback.print_exc()
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:  # noqa: BLE001
                pass
        os._exit(code if isinstance(code, int) else 1)


def _take_environment(env: dict[str, str]) -> None:
    """Make ``os.environ`` exactly ``env``, changing only what differs: the test process's
    environment is mostly the parent's, and clearing and refilling it (a putenv or unsetenv
    each) took some 0.2 ms of a broker's start."""
    for key in [key for key in os.environ if key not in env]:
        del os.environ[key]
    for key, value in env.items():
        if os.environ.get(key) != value:
            os.environ[key] = value


def _write_probe(path: str) -> None:
    import random

    import trio

    with open(path, "w") as probe:
        json.dump({"random": random.random(), "trio": trio._core._run._r.random(), "pid": os.getpid(),
                   "threads": len(os.listdir("/proc/self/task"))}, probe)


def _reseed() -> None:
    """Fresh randomness for each broker: ``random``'s global generator is re-seeded by Python
    at fork, trio's scheduler generator is not (it was seeded once, at the parent's import)."""
    import random

    import trio

    random.seed()
    trio._core._run._r.seed()
