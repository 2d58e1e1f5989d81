"""Generated requests against the OpenAPI document the server serves (`/openapi.json`), with
schemathesis: for every route and method, bounded examples must get no server error and a reply
whose status, content type and body match the document; bodies that break the document (negative mode: wrong types, unknown keys,
missing ones) must be refused with a 4xx. The document gives types, not ranges
(token ids within the vocabulary, a prompt that fits the context), so a schema-valid body may
still be refused with a documented 400: the check that valid data is accepted is left out.
Hypothesis drives each operation's strategy directly (bounded, derandomized)."""

import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from schemathesis.generation.modes import GenerationMode
from schemathesis.specs.openapi.checks import positive_data_acceptance

EXAMPLES = 50
# The operations with a JSON body, run in negative mode too.
BODIES = {"POST /v1/completions", "POST /v1/chat/completions", "POST /v1/responses", "POST /tokenize",
          "POST /detokenize", "POST /v1/sessions/{name}"}


def test_routes_match_the_document(base_url):
    schema = schemathesis.openapi.from_url(base_url + "/openapi.json")
    operations = [r.ok() for r in schema.get_all_operations()]
    labels = {o.label for o in operations}
    assert BODIES <= labels, sorted(labels)
    for op in operations:
        run(op, GenerationMode.POSITIVE)
        if op.label in BODIES:
            run(op, GenerationMode.NEGATIVE)


def run(op, mode):
    """EXAMPLES generated calls of `op` in `mode`, each checked against the document."""
    @given(case=op.as_strategy(generation_mode=mode))
    @settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None,
              phases=[Phase.explicit, Phase.generate], suppress_health_check=list(HealthCheck))
    def call(case):
        case.call_and_validate(timeout=60, excluded_checks=[positive_data_acceptance])

    try:
        call()
    except Exception as e:
        raise AssertionError(f"{op.label} ({mode}): {e}") from e
