"""
Gatehouse: agentic RAG as Haystack pipelines in YAML; its components, stores, command line, serving and evaluation.

Importing the package makes the process private before anything imports Haystack, Ragas or the Hugging Face
libraries: their usage telemetry is off and models load offline, unless the environment already says otherwise
(`HAYSTACK_TELEMETRY_ENABLED=True` opts back in). Haystack imported earlier by someone else gets its telemetry
client switched off too. It also sets the OpenMP threads torch encodes with to sleep while they wait
(`THREAD_ENVIRONMENT`): on a shared machine a waiting thread that spins takes the core its working twin needs.
"""

import os as _os
import sys as _sys

#: Environment defaults that keep a process from calling home (an existing value is kept).
PRIVATE_ENVIRONMENT = {
    "HAYSTACK_TELEMETRY_ENABLED": "False",
    "RAGAS_DO_NOT_TRACK": "true",
    "HF_HUB_OFFLINE": "1",
    "HF_HUB_DISABLE_TELEMETRY": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "DO_NOT_TRACK": "1",
}


def make_private() -> None:
    """Apply `PRIVATE_ENVIRONMENT` (keeping values already set) and switch off a Haystack telemetry client made earlier."""
    for key, value in PRIVATE_ENVIRONMENT.items():
        _os.environ.setdefault(key, value)
    telemetry = _sys.modules.get("haystack.telemetry._telemetry")
    if telemetry is not None and _os.environ["HAYSTACK_TELEMETRY_ENABLED"].lower() not in ("true", "1"):
        telemetry.telemetry = None


#: Environment defaults for torch's OpenMP threads, read once when torch is imported (an existing value is kept): a
#: thread waiting for work sleeps instead of spinning, so on a machine busy with other processes a question is encoded
#: in milliseconds rather than seconds; the vectors are the same.
THREAD_ENVIRONMENT = {"OMP_WAIT_POLICY": "PASSIVE"}
#: The keys of `THREAD_ENVIRONMENT` this import set because the caller had not: what llama.cpp is loaded without
#: (`gatehouse.llm.server.native_thread_environment`).
THREAD_DEFAULTS_SET = tuple(key for key in THREAD_ENVIRONMENT if key not in _os.environ)

make_private()
for _key, _value in THREAD_ENVIRONMENT.items():
    _os.environ.setdefault(_key, _value)
