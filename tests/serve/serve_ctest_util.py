"""serve_ctest_util.py: what the Python ctests of `tprun serve` share: a free port, the server started on the CPU
backend and waited for (/health), stopped at the end, and a ChatML chat template for fixtures that have none."""
import os
import socket
import subprocess
import time
import urllib.request

CHATML = ("{% for m in messages %}{{ '<|im_start|>' + m['role'] + '\\n' + m['content'] + '<|im_end|>\\n' }}"
          "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def write_chatml(work_dir):
    """CHATML in WORK_DIR/chatml.jinja; returns its path."""
    path = os.path.join(work_dir, "chatml.jinja")
    with open(path, "w") as f:
        f.write(CHATML)
    return path


class Server:
    """`tprun MODEL ARGS... serve --port P SERVE_ARGS...` with its output in WORK_DIR/serve.log, ready (/health
    answered) when the constructor returns; RuntimeError when it exits or is not ready within `timeout` s.
    A context manager: stopped (SIGTERM, then SIGKILL after 30 s) on exit."""

    def __init__(self, tprun, model, work_dir, args=(), serve_args=(), timeout=60):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = os.path.join(work_dir, "serve.log")
        self._log = open(self.log_path, "w")
        self.proc = subprocess.Popen([tprun, model, *args, "serve", "--port", str(self.port), *serve_args,
                                      "--idle-exit", "120"], stdout=self._log, stderr=subprocess.STDOUT)
        deadline = time.time() + timeout
        while True:
            try:
                urllib.request.urlopen(self.url + "/health", timeout=2).read()
                return
            except OSError:
                if self.proc.poll() is not None or time.time() > deadline:
                    self.stop()
                    raise RuntimeError(f"tprun serve did not start (see {self.log_path})")
                time.sleep(0.2)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        self._log.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()
