"""One rule for credentials, wherever a user could put one.

- The one credential a service needs while it runs, its API key, is the service's `api_key`:
  it reaches the host only in the service's 0600 EnvironmentFile (VLLM_API_KEY).
- A hub token is never needed by a unit (units serve the local copy with HF_HUB_OFFLINE=1):
  downloads take theirs from model_weights_hf_token / model_weights_modelscope_token.
- Anything else that looks like a credential (an option or variable named like one, a URL
  with user:password@) is refused with the variable to use instead: units, launchers and
  argv are readable by every user of the host, and the controller logs what it runs.
- `mask` is the last line: every error and log line the toolkit prints goes through it.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from typing import Any

HIDDEN = "***"
_NAME = r"(?:[A-Za-z0-9]+[_-])*(?:token|api[_-]?key|password|passwd|secret)(?:[_-][A-Za-z0-9]+)*"
CREDENTIAL_NAME = re.compile(rf"(?i){_NAME}")
_URL_USERINFO = re.compile(r"(?P<keep>[A-Za-z][A-Za-z0-9+.-]*://)[^/\s@'\"]+(?=@)")
_BEARER = re.compile(r"(?i)(?P<keep>\bbearer\s+)[A-Za-z0-9._~+/=-]{4,}")
# Token shapes of the hubs and the usual providers (Hugging Face, OpenAI-style, GitHub, GitLab).
_SHAPES = re.compile(r"\b(?P<keep>hf_|sk-|ghp_|gho_|github_pat_|glpat-)[A-Za-z0-9_-]{6,}")
# --name value, name=value, "name": "value" (JSON, Python reprs), snake_name: value (YAML).
_NAMED = re.compile(
    rf"(?i)(?P<keep>--{_NAME}(?:=|\s+)['\"]?|\b{_NAME}['\"]?\s*=\s*['\"]?"
    rf"|['\"]{_NAME}['\"]\s*:\s*['\"]?|\b(?=[A-Za-z0-9]+[_-]){_NAME}\s*:\s*['\"]?)"
    r"(?!\*\*\*)[^\s'\",}\]]+"
)

# Environment variables and vLLM options that carry a hub token, and what to set instead.
HUB_TOKENS = {
    "HF_TOKEN": "model_weights_hf_token",
    "HUGGING_FACE_HUB_TOKEN": "model_weights_hf_token",
    "HF_HUB_TOKEN": "model_weights_hf_token",
    "MODELSCOPE_API_TOKEN": "model_weights_modelscope_token",
    "MODELSCOPE_TOKEN": "model_weights_modelscope_token",
    "hf-token": "model_weights_hf_token",
}
# URL variables whose credentials have a variable of their own.
URL_CREDENTIALS = {
    "model_weights_hf_endpoint": "model_weights_hf_token",
    "model_weights_modelscope_endpoint": "model_weights_modelscope_token",
}

_known: set[str] = set()


def remember(*values: Any) -> None:
    """Secret values read from an inventory: masked wherever they appear afterwards."""
    _known.update(str(v) for v in values if isinstance(v, str) and len(v) >= 4)


def mask(text: str) -> str:
    """The text with every credential in it replaced by ***."""
    for value in sorted(_known, key=len, reverse=True):
        text = text.replace(value, HIDDEN)
    for pattern in (_URL_USERINFO, _BEARER, _SHAPES, _NAMED):
        text = pattern.sub(lambda m: m.group("keep") + HIDDEN, text)
    return text


def has_url_credentials(text: str) -> bool:
    return bool(_URL_USERINFO.search(text))


def is_credential_name(name: str) -> bool:
    return bool(CREDENTIAL_NAME.fullmatch(name.strip().lstrip("-")))


def hub_token_message(var: str, instead: str) -> str:
    return (
        f"{var} is a hub token: the unit serves the local copy offline (HF_HUB_OFFLINE=1) "
        f"and never needs it; give downloads theirs with {instead} (from the vault)"
    )


def named_credential_message(var: str) -> str:
    return (
        f"{var} looks like a credential, and the unit, its launcher and its argv are readable "
        "by every user of the host: the API key is the service's api_key (a 0600 file), hub "
        "tokens are model_weights_hf_token / model_weights_modelscope_token (from the vault)"
    )


def url_credentials_message(var: str) -> str:
    instead = URL_CREDENTIALS.get(var.split(".")[0].split("[")[0])
    fix = (
        f"give the URL without them and set {instead} (from the vault)"
        if instead
        else "give the URL without them and put them where the client reads them on the "
        "host (~/.netrc for pip and the hubs)"
    )
    return f"{var} has credentials in its URL (user:password@), which would reach logs; {fix}"


def _strings(value: Any, where: str) -> Iterator[tuple[str, str]]:
    if isinstance(value, Mapping):
        for key, item in value.items():
            yield from _strings(item, f"{where}.{key}")
    elif isinstance(value, (list, tuple)):
        for index, item in enumerate(value):
            yield from _strings(item, f"{where}[{index}]")
    elif isinstance(value, str):
        yield where, value


def url_credential_errors(values: Mapping[str, Any]) -> list[str]:
    """One message per string, anywhere inside the given variables, that is a URL with
    credentials in it (named by its path: acceldeploy_services[0].env.HF_ENDPOINT)."""
    return [
        url_credentials_message(where)
        for name, value in sorted(values.items())
        for where, text in _strings(value, name)
        if has_url_credentials(text)
    ]
