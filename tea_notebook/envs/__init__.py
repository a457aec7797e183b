"""Live environments for ECP: a Python / shell sandbox, the run's files, a browser, the kernel.

Each is an :class:`~tea_notebook.envs.base.Environment` subclass; ``ws.envs.add(cls, **config)``
registers it, and ECP's session manager starts one session per run on its first action and stops
it when the run ends. The built-in ones are added on first use by name (``--env python``).
ECP sits below this package and does not import it: the Workspace hands ECP the session manager
(:class:`~tea_notebook.envs.sessions.SessionManager`) and :data:`BUILTIN`.
"""

BUILTIN = {
    "python": "tea_notebook.envs.sandbox:PythonSandbox",
    "files": "tea_notebook.envs.files:FileSystem",
    "browser": "tea_notebook.envs.browser:Browser",
    "kernel": "tea_notebook.envs.kernel:KernelEnvironment",
    "notebook": "tea_notebook.envs.notebook_cells:NotebookCells",
}
