"""The OpenAPI document describes ``/v1/run`` and ``/v1/match`` as the one result shape: its
response models have the fields, nesting and required fields of the published JSON Schema
(``contextstore.interfaces.result_schemas``) that the CLI and the MCP tools are held to."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from openapi_spec_validator import validate

from contextstore.interfaces.result_schemas import MATCH_SCHEMA, RUN_SCHEMA
from contextstore.interfaces.service.app import build_api
from contextstore.interfaces.web.settings import ServiceSettings
from contextstore.interfaces.web.telemetry import Telemetry


@pytest.fixture(scope="module")
def spec(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    keys: Path = tmp_path_factory.mktemp("keys") / "keys.json"
    document: dict[str, Any] = build_api(ServiceSettings(keys_file=keys), Telemetry()).openapi()
    return document


def fields(schema: dict[str, Any], spec: dict[str, Any], path: str = "") -> dict[str, Any]:
    """Every field path of ``schema`` (``lessons.included[].entity_id``) with whether it is
    required, ``$ref`` and ``null`` alternatives resolved; a ``metadata`` object is open."""
    if "$ref" in schema:
        name = schema["$ref"].removeprefix("#/components/schemas/")
        return fields(spec["components"]["schemas"][name], spec, path)
    for key in ("anyOf", "oneOf"):
        if key in schema:
            [branch] = [item for item in schema[key] if item.get("type") != "null"]
            return fields(branch, spec, path)
    found: dict[str, Any] = {}
    if schema.get("type") == "array" and "items" in schema:
        return fields(schema["items"], spec, f"{path}[]")
    if "properties" in schema:
        required = set(schema.get("required", ()))
        for name, inner in schema["properties"].items():
            found[f"{path}.{name}"] = name in required
            if name != "metadata":
                found |= fields(inner, spec, f"{path}.{name}")
    return found


def response_schema(spec: dict[str, Any], path: str) -> dict[str, Any]:
    content = spec["paths"][path]["post"]["responses"]["200"]["content"]
    schema: dict[str, Any] = content["application/json"]["schema"]
    return schema


@pytest.mark.parametrize(
    ("path", "published", "model"),
    [("/v1/run", RUN_SCHEMA, "RunJson"), ("/v1/match", MATCH_SCHEMA, "MatchJson")],
)
def test_the_response_model_is_the_published_shape(
    spec: dict[str, Any], path: str, published: dict[str, Any], model: str
) -> None:
    answer = response_schema(spec, path)
    assert answer == {"$ref": f"#/components/schemas/{model}"}
    described = fields(answer, spec)
    assert described == fields(published, spec)
    assert len(described) > 10
    assert spec["components"]["schemas"][model]["description"].startswith("A ")


def test_the_old_response_names_are_gone(spec: dict[str, Any]) -> None:
    validate(spec)
    schemas = spec["components"]["schemas"]
    assert "ContextResult" not in schemas and "MatchResponse" not in schemas
    assert "MatchResult" not in schemas
    run = schemas["RunJson"]["properties"]
    assert "prompt" in run and run["query_analysis"] == {
        "$ref": "#/components/schemas/QueryAnalysisJson"
    }
