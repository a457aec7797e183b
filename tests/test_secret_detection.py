"""Secrets found by content (issue 31, N10): known token formats, high-entropy tokens, secrets said in
prose and encodings of known secrets, wherever redaction applies (events, stored contexts, blobs,
exports). Every key here is generated at run time in the real format (never a real key); the
false positives on ordinary text (this repository's docs and sources, the spec digests) are counted
and bounded."""

from __future__ import annotations

import base64
import json
import random
import string
import time
from pathlib import Path
from urllib.parse import quote

import pytest

import tea_notebook
from tea_notebook.models.offline import ScriptedModel, call
from tea_notebook.protocol.manifest import export_manifest
from tea_notebook.redaction import redact
from tea_notebook.secret_detection import ENTROPY_FLOOR, encoded_forms, entropy, find_secrets, redact_content

ROOT = Path(__file__).resolve().parents[1]
SPEC = Path("/work/shared/spec")
ALNUM = string.ascii_letters + string.digits
UPPER_DIGITS = string.ascii_uppercase + string.digits
B64 = ALNUM + "+/"
URLSAFE = ALNUM + "-_"
#: the bound on false positives: findings per 10,000 lines of ordinary prose and code
FALSE_POSITIVES_PER_10K_LINES = 1


def _s(rng: random.Random, alphabet: str, n: int) -> str:
    return "".join(rng.choice(alphabet) for _ in range(n))


def _jwt(rng: random.Random) -> str:
    def part(obj: dict) -> str:
        return base64.urlsafe_b64encode(json.dumps(obj).encode()).decode().rstrip("=")

    claims = {"sub": _s(rng, string.digits, 10), "name": "Ada", "iat": rng.randrange(1_600_000_000, 1_800_000_000)}
    signature = base64.urlsafe_b64encode(rng.randbytes(32)).decode().rstrip("=")
    return f"{part({'alg': 'HS256', 'typ': 'JWT'})}.{part(claims)}.{signature}"


def _pem(rng: random.Random) -> str:
    body = base64.b64encode(rng.randbytes(600)).decode()
    lines = "\n".join(body[i : i + 64] for i in range(0, len(body), 64))
    kind = rng.choice(["RSA ", "EC ", "OPENSSH ", ""])
    return f"-----BEGIN {kind}PRIVATE KEY-----\n{lines}\n-----END {kind}PRIVATE KEY-----"


#: one generator per format: a fake key in the real format (prefix, alphabet, length)
GENERATORS = {
    "aws_access_key": lambda r: "AKIA" + _s(r, UPPER_DIGITS, 16),
    "aws_temporary_key": lambda r: "ASIA" + _s(r, UPPER_DIGITS, 16),
    "github_token": lambda r: r.choice(["ghp_", "gho_", "ghu_", "ghs_", "ghr_"]) + _s(r, ALNUM, 36),
    "github_pat": lambda r: "github_pat_" + _s(r, ALNUM, 22) + "_" + _s(r, ALNUM, 59),
    "gitlab_token": lambda r: "glpat-" + _s(r, URLSAFE, 20),
    "slack_bot_token": lambda r: f"xoxb-{_s(r, string.digits, 12)}-{_s(r, string.digits, 13)}-{_s(r, ALNUM, 24)}",
    "slack_user_token": lambda r: f"xoxp-{_s(r, string.digits, 12)}-{_s(r, string.digits, 12)}-{_s(r, ALNUM, 32)}",
    "slack_webhook": lambda r: (
        f"https://hooks.slack.com/services/T{_s(r, UPPER_DIGITS, 8)}/B{_s(r, UPPER_DIGITS, 10)}/{_s(r, ALNUM, 24)}"
    ),
    "openai_key": lambda r: "sk-" + _s(r, ALNUM, 48),
    "openai_project_key": lambda r: "sk-proj-" + _s(r, URLSAFE, 120),
    "anthropic_key": lambda r: "sk-ant-api03-" + _s(r, URLSAFE, 93) + "AA",
    "google_api_key": lambda r: "AIza" + _s(r, URLSAFE, 35),
    "google_oauth_secret": lambda r: "GOCSPX-" + _s(r, URLSAFE, 28),
    "google_access_token": lambda r: "ya29." + _s(r, URLSAFE, 120),
    "stripe_secret": lambda r: r.choice(["sk_live_", "sk_test_", "rk_live_"]) + _s(r, ALNUM, 24),
    "stripe_webhook_secret": lambda r: "whsec_" + _s(r, ALNUM, 32),
    "huggingface_token": lambda r: "hf_" + _s(r, ALNUM, 34),
    "npm_token": lambda r: "npm_" + _s(r, ALNUM, 36),
    "pypi_token": lambda r: "pypi-AgEIcHlwaS5vcmc" + _s(r, URLSAFE, 60),
    "sendgrid_key": lambda r: f"SG.{_s(r, URLSAFE, 22)}.{_s(r, URLSAFE, 43)}",
    "jwt": _jwt,
    "private_key": _pem,
}
#: the ways a key is pasted: in a sentence, a JSON value, an env line, a header, a list, a URL query
CONTEXTS = (
    "use {} for the deploy",
    '{{"config": "{}"}}',
    "export SERVICE_CONFIG={}\n",
    "X-Custom: {}",
    "- {}\n- next item",
    "see https://example.test/cb?x={}&y=1",
)


def _caught(text: str, secret: str) -> bool:
    out = str(redact(text))
    around = text.replace(secret, " ")
    # no 8-character piece of the secret survives (a piece the text has elsewhere, "https://", aside)
    pieces = (secret[i : i + 8] for i in range(0, max(1, len(secret) - 7), 4))
    return all(p not in out for p in pieces if p not in around)


@pytest.mark.parametrize("fmt", sorted(GENERATORS))
def test_every_generated_key_of_a_known_format_is_caught_in_every_context(fmt):
    rng = random.Random(f"format:{fmt}")
    for i in range(12):
        key = GENERATORS[fmt](rng)
        template = CONTEXTS[i % len(CONTEXTS)]
        if "\n" in key and template.startswith("see"):
            template = CONTEXTS[0]
        text = template.format(key)
        assert _caught(text, key), (fmt, text, redact(text))


def test_an_aws_secret_key_is_caught_near_its_access_key():
    rng = random.Random("aws")
    for _ in range(20):
        access, secret = "AKIA" + _s(rng, UPPER_DIGITS, 16), _s(rng, B64, 40)
        text = f"keys for the backup job: {access} and {secret} (rotate monthly)"
        found = {f.detector for f in find_secrets(text)}
        assert {"aws_access_key"} <= found and secret not in redact_content(text), text


def test_basic_auth_in_urls_and_headers_is_caught():
    rng = random.Random("basic")
    for _ in range(10):
        user, password = _s(rng, string.ascii_lowercase, 6), _s(rng, ALNUM, 12)
        out = redact(f"clone https://{user}:{password}@git.example.test/repo.git then build")
        assert password not in out and f"https://{user}:" in out
        header = "Authorization: Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()
        assert base64.b64encode(f"{user}:{password}".encode()).decode() not in redact(header)


# -- high entropy ----------------------------------------------------------------------------------
def _random_token(rng: random.Random, n: int, alphabet: str = ALNUM) -> str:
    while True:  # a token with upper case, lower case and digits (what the detector looks for)
        t = _s(rng, alphabet, n)
        if any(c.isupper() for c in t) and any(c.islower() for c in t) and any(c.isdigit() for c in t):
            return t


@pytest.mark.parametrize("length, at_least", [(20, 0.93), (24, 0.95), (32, 0.96), (40, 0.97), (64, 0.98), (100, 0.99)])
def test_random_tokens_of_no_known_format_are_caught_by_entropy(length, at_least):
    """The measurement behind ENTROPY_FLOOR: random mixed-case alphanumeric tokens (and URL-safe
    base64 ones) are caught at these rates; the floor sits near the 1st percentile of their entropy."""
    rng = random.Random(f"entropy:{length}")
    for alphabet in (ALNUM, URLSAFE, B64):
        tokens = [_random_token(rng, length, alphabet) for _ in range(600)]
        caught = sum(1 for t in tokens if redact_content(f"value {t} end") != f"value {t} end")
        assert caught / len(tokens) >= at_least, (length, alphabet[-2:], caught)


def test_the_entropy_floor_is_below_random_tokens_and_above_names():
    rng = random.Random("floor")
    for length, floor in ENTROPY_FLOOR:
        samples = sorted(entropy(_random_token(rng, length)) for _ in range(1000))
        assert samples[int(0.03 * len(samples))] >= floor, (length, floor, samples[:10])
    for name in (
        "Qwen3-VL-30B-A3B-Instruct",
        "sentence-transformers/all-MiniLM-L6-v2",
        "cp310-abi3-manylinux_2_28_x86_64",
        "test_a_provider_failing_with_429_then_500_is_retried",
        "home-listing-marker-5f3a",
        "anthropic/claude-sonnet-4-5",
        "tea_notebook/runtime/event_types.py",
    ):
        assert find_secrets(name) == [], name


def test_digests_ids_paths_and_images_are_not_taken_for_secrets():
    rng = random.Random("ids")
    import hashlib
    import uuid

    png = "data:image/png;base64," + base64.b64encode(rng.randbytes(3000)).decode()
    for text in (
        hashlib.sha256(b"x").hexdigest(),
        "sha256:" + hashlib.sha1(b"y").hexdigest(),
        str(uuid.UUID(int=rng.getrandbits(128))),
        "18c2f1e7a9b0000012345abcde",  # a run id
        "/usr/lib/python3.11/site-packages/tea_notebook/runtime/loop.py",
        png,
        "commit 2ca4c03b1f9e8d7c6b5a4f3e2d1c0b9a8f7e6d5c",
    ):
        assert redact(text) == text, text


# -- prose -----------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "text, secret",
    [
        ("The vault pass phrase is correct-horse-battery-staple.", "correct-horse-battery-staple"),
        ("the vault passphrase is 'correct horse battery staple'", "correct horse battery staple"),
        ("FYI my password is hunter2!, do not share", "hunter2"),
        ("Log in with password: Tr0ub4dor&3 and the user admin", "Tr0ub4dor&3"),
        ("The API key is k7Hq2-x9Lm", "k7Hq2-x9Lm"),
        ("our staging secret was s3cr3t-staging", "s3cr3t-staging"),
        ("The access token is set to Zq8k3LmN0pX7", "Zq8k3LmN0pX7"),
        ("credentials: bob/Pa55word", "bob/Pa55word"),
        ("the wifi password is “orange-Tiger-42”", "orange-Tiger-42"),
        ("Password -> 7ieben-Zwerge", "7ieben-Zwerge"),
        ("the admin password: hUNTerTWO", "hUNTerTWO"),
    ],
)
def test_a_secret_said_in_prose_is_redacted(text, secret):
    out = redact(text)
    assert secret not in out, out
    assert redact_content(text) != text  # the content detector alone finds it


@pytest.mark.parametrize(
    "text",
    [
        "The password is required.",
        "The secret: I need to add the numbers first.",
        "def login(user: str, password: str) -> None: ...",
        "api_key: SecretStr = Field(default=None)",
        "token = os.environ.get('GITHUB_TOKEN')",
        "The token is stored in the keyring and rotated monthly.",
        "Your password was changed yesterday.",
        "the secret is that there is no secret",
        "the monkey is abc123456",
        "max_tokens=5, tokens: 1234 used",
        "credentials: ~/.aws/credentials",
    ],
)
def test_prose_about_secrets_is_left_alone(text):
    assert redact_content(text) == text


def test_prose_is_not_read_where_key_names_are_structure():
    text = "the password is hunter2x"
    assert redact(text, keys=False) == text and redact(text) != text


# -- encodings -------------------------------------------------------------------------------------
ENV = "TEA_TEST_ENCODED_TOKEN"
KNOWN = "vault-Root-7f3!pass"  # no known format, modest entropy: only the environment marks it


@pytest.fixture
def known_secret(monkeypatch):
    monkeypatch.setenv(ENV, KNOWN)


def test_a_known_secret_is_redacted_in_base64_hex_and_url_encoding(known_secret):
    raw = KNOWN.encode()
    for encoded in (
        base64.b64encode(raw).decode(),
        base64.urlsafe_b64encode(raw).decode().rstrip("="),
        raw.hex(),
        raw.hex().upper(),
        quote(KNOWN, safe=""),
    ):
        out = redact(f"the blob is {encoded} ok")
        assert encoded not in out and f"[{ENV} redacted]" in out, (encoded, out)


def test_a_known_secret_inside_a_longer_base64_text_is_redacted_at_every_alignment(known_secret):
    for prefix in (b"", b"x", b"xy", b"user:", b'{"password": "'):
        blob = base64.b64encode(prefix + KNOWN.encode() + b'", "more": 1}').decode()
        out = redact(f"Authorization-ish blob {blob}")
        decoded = out.split()[-1]
        assert KNOWN[2:-2] not in _lenient_b64(decoded), (prefix, out)


def _lenient_b64(text: str) -> str:
    """What can still be read back from a partly redacted base64 text."""
    pieces = []
    for piece in text.replace("[", " ").replace("]", " ").split():
        piece = piece[: len(piece) // 4 * 4]
        try:
            pieces.append(base64.b64decode(piece).decode("utf-8", "replace"))
        except ValueError:
            pass
    return "".join(pieces)


def test_encoded_forms_cover_each_alignment():
    value = "abcdefghij-secret"
    for prefix in (b"", b"1", b"12", b"123"):
        encoded = base64.b64encode(prefix + value.encode() + b"tail").decode()
        assert any(form in encoded for form in encoded_forms(value)), prefix


def test_a_base64_or_hex_encoded_token_of_a_known_format_is_caught():
    rng = random.Random("encoded")
    for _ in range(10):
        token = "ghp_" + _s(rng, ALNUM, 36)
        for encoded in (
            base64.b64encode(f"token {token}".encode()).decode(),
            base64.urlsafe_b64encode(f"{token}\n".encode()).decode(),
            f"token {token}".encode().hex(),
        ):
            assert encoded not in str(redact(f"payload={encoded}")) and encoded not in redact_content(f"x {encoded} y")


# -- false positives on ordinary text ------------------------------------------------------------
def _ordinary_files() -> list[Path]:
    files = sorted((ROOT / "docs").rglob("*.md")) + sorted((ROOT / "tea_notebook").rglob("*.py"))
    files += sorted(SPEC.glob("*.md")) if SPEC.is_dir() else []
    return [f for f in files if "_run" not in f.parts]


def test_false_positives_on_this_repositorys_docs_sources_and_the_spec_digests_are_few():
    """Every line of the docs, the package's Python sources and the spec digests, scanned as a text
    of its own: the findings are counted (each is listed on failure) and bounded."""
    lines = 0
    findings = []
    for path in _ordinary_files():
        for line in path.read_text(errors="replace").splitlines():
            lines += 1
            for f in find_secrets(line):
                findings.append((f.detector, line[f.start : f.end], str(path.relative_to(path.anchor))))
    assert lines >= 3000
    bound = FALSE_POSITIVES_PER_10K_LINES * lines / 10_000
    assert len(findings) <= bound, (lines, findings)
    # whole files too (multi-line texts, as observations are): the same few
    whole = [f for path in _ordinary_files() for f in find_secrets(path.read_text(errors="replace"))]
    assert len(whole) <= bound, whole


# -- everywhere redaction applies ----------------------------------------------------------------
def _raw_store(path: Path) -> str:
    data = b"".join(p.read_bytes() for p in sorted(path.rglob("*")) if p.is_file())
    return data.decode("utf-8", "replace")


def test_a_run_stores_no_content_found_secret_in_events_contexts_blobs_or_exports(tmp_path, known_secret):
    rng = random.Random("run")
    token = _random_token(rng, 40)  # no format: only its entropy gives it away
    github = "ghp_" + _s(rng, ALNUM, 36)
    phrase = "correct-horse-battery-staple-Nine"
    encoded = base64.b64encode(KNOWN.encode()).decode()
    task = f"Deploy with the vault pass phrase is {phrase}; the session is {token}; blob {encoded}"
    ws = tea_notebook.Workspace(tmp_path / "ws", embedder="hashing")

    @ws.tools.tool
    def fetch_config() -> str:
        """Read the deployment configuration."""
        return f"ok {github} " + "padding " * 5000  # long: clipped in the event, kept whole as a blob

    script = ScriptedModel([call("fetch_config"), call("done", success=True, text=f"used {token}")])
    result = ws.agent("deployer", model=script.name, tools=["fetch_config"]).run_sync(task)
    assert result.success
    request = ws.trajectory(result.run_id).context(1)  # the stored context, as the model saw it
    shown = repr(request)
    tree = ws.db.export_run_tree(result.run_id)
    ws.close()
    stored = _raw_store(tmp_path / "ws")
    for secret in (token, github, phrase, encoded, KNOWN):
        assert secret not in stored, secret
        assert secret not in json.dumps(tree, default=str), secret
        assert secret not in shown, secret


def test_an_exported_manifest_holds_no_high_entropy_token(tmp_path):
    rng = random.Random("manifest")
    token = _random_token(rng, 48)
    ws = tea_notebook.Workspace(tmp_path / "ws", embedder="hashing")
    source = f'def call_service(x: int) -> int:\n    """Call the service."""\n    session = "{token}"\n    return x\n'
    ws.tools.register(
        {
            "name": "call_service",
            "description": "Calls the service",
            "parameters": {"type": "object", "properties": {"x": {"type": "integer"}}, "required": ["x"]},
            "source": source,
        }
    )
    manifest = export_manifest(ws.tools)
    assert token not in json.dumps(manifest)
    ws.close()


def test_hostile_inputs_take_linear_time():
    size = 1_000_000
    for text in (
        "password is " * (size // 12),
        "the api key: " * (size // 13),
        ("Ab3" * 7 + " ") * (size // 22),
        "a" * size,
        ("x" * 14 + " ") * (size // 15),
        "eyJ" * (size // 3),
    ):
        started = time.perf_counter()
        find_secrets(text)
        assert time.perf_counter() - started < 10, text[:30]


def test_a_random_looking_key_of_a_mapping_is_a_name_but_a_known_format_key_is_still_a_secret():
    # a schema's property named like a token stays (export/import round-trips it); its value does not
    token = "g000011223456789ABCDqZ"
    github = "ghp_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8"
    schema = {"properties": {token: {"type": "string"}}, "required": [token], github: 1}
    out = redact(schema, keys=False)  # a structural document: names are also values (required)
    assert token in out["properties"] and out["required"] == [token]
    assert github not in json.dumps(out)
    event = redact({token: "x", "note": token})  # an event: a key is a name, a value is content
    assert token in event and event["note"] != token
