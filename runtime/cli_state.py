"""``streamjob state query``: keys looked up in a running job's queryable state (its REST API, as
``QueryableStateClient`` does). The ``state`` group and its offline commands are streamjob.state's."""

from __future__ import annotations

import json

import click

from .cli_control import JOB_HELP, _address, _json_flag, _token, echo, fail, print_json, target


@click.command(epilog=JOB_HELP.replace(" (no JOB: the only running job)", "") + " With --address, JOB is "
                                  "the job's id or name all the same (checked). A KEY is JSON (42, \"a b\", [1, \"x\"], {\"user\": 7}); a bare word is a "
                                  "string. Keys are converted with the job's key type (key_by(..., key_type=)).")
@click.argument("job")
@click.argument("name")
@click.argument("keys", nargs=-1, required=True, metavar="KEY...")
@_address
@_token
@_json_flag
@click.option("--consistency", type=click.Choice(["live", "checkpoint"]), default="live", show_default=True,
              help="live: the working state (as Flink's queryable state; can be ahead of committed output, rolled "
                   "back by a failure); checkpoint: the latest completed checkpoint's (stable).")
def query(job: str, name: str, keys: tuple[str, ...], address: str | None, token: str, as_json: bool,
          consistency: str) -> None:
    """Look KEYs up in queryable state NAME of JOB: one line per key, `KEY<TAB>VALUE` (VALUE as JSON;
    `(none)` where the key has no value)."""
    from .rest_client import RestError, call

    t = target(None if address else job, address, token)
    try:
        listed = call(t.address, t.token, "GET", "/v1/state")["states"]
    except RestError as e:
        fail(str(e))
    if name not in {s["name"] for s in listed}:
        names = ", ".join(repr(s["name"]) for s in listed) or "none yet"
        fail(f"no queryable state {name!r} in this job; queryable states: {names}")
    parsed = [_parse(k) for k in keys]
    from urllib.parse import quote

    doc = t.call("POST", f"/v1/state/{quote(name, safe='')}", {"keys": parsed, "consistency": consistency})
    if as_json:
        return print_json(doc)
    for given, r in zip(keys, doc["results"]):
        echo(f"{given}\t{json.dumps(r['value'], ensure_ascii=False) if r['found'] else '(none)'}")


def _parse(text: str) -> object:
    """A key typed on the command line: JSON, or a bare word as a string."""
    try:
        return json.loads(text)
    except ValueError:
        return text
