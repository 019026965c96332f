"""Checks toolgate's tool lists with each provider's own code (tests/providers.rs runs it).

    python check.py DUMP.json

DUMP.json holds `formats` (format name -> the `tools` value of `GET /tools?format=`),
`plain_inputs` and `strict_inputs` (tool -> an input as a plain client and as a strict-mode
model send it) and `outputs` (tool -> an output it answered). Exits non-zero, saying where, on
the first check that fails; prints one line per check that passed.
"""

import copy
import json
import sys

import jsonschema
import pydantic
from agents.strict_schema import ensure_strict_json_schema
from anthropic import transform_schema
from anthropic.types import ToolParam
from google.genai import types as genai
from mcp import types as mcp
from openai.types.chat import ChatCompletionFunctionToolParam
from openai.types.responses import FunctionToolParam

OPENAI_STRICT_KEYWORDS = {
    "type", "description", "title", "enum", "const", "anyOf", "$ref", "$defs", "properties",
    "required", "additionalProperties", "items", "pattern", "format", "multipleOf", "maximum",
    "exclusiveMaximum", "minimum", "exclusiveMinimum", "minItems", "maxItems",
}
SUBSCHEMA_LISTS = ("anyOf", "allOf", "oneOf", "prefixItems")
SUBSCHEMA_MAPS = ("properties", "$defs", "patternProperties")
SUBSCHEMA_ONE = ("items", "additionalProperties", "not", "if", "then", "else", "contains")


def nodes(schema, path="#"):
    """Every object schema inside `schema`, with its path."""
    if not isinstance(schema, dict):
        return
    yield path, schema
    for key in SUBSCHEMA_ONE:
        if isinstance(schema.get(key), dict):
            yield from nodes(schema[key], f"{path}/{key}")
    for key in SUBSCHEMA_LISTS:
        for i, member in enumerate(schema.get(key) or []):
            yield from nodes(member, f"{path}/{key}/{i}")
    for key in SUBSCHEMA_MAPS:
        for name, member in (schema.get(key) or {}).items():
            yield from nodes(member, f"{path}/{key}/{name}")


def fail(where, message):
    sys.exit(f"FAILED {where}: {message}")


def check_2020_12(where, schema):
    try:
        jsonschema.Draft202012Validator.check_schema(schema)
    except jsonschema.SchemaError as err:
        fail(where, f"not valid JSON Schema 2020-12: {err.message} at {list(err.path)}")


def accepts(where, schema, instance):
    errors = list(jsonschema.Draft202012Validator(schema).iter_errors(instance))
    if errors:
        fail(where, f"refuses {json.dumps(instance)}: {errors[0].message} at {list(errors[0].path)}")


def common_rules(where, schema, *, root_object=True):
    """What every format promises (issue 11, section 2)."""
    for key in ("$schema", "$id", "title"):
        if key in schema:
            fail(where, f"root has {key}")
    if root_object and schema.get("type") != "object":
        fail(where, f"root type is {schema.get('type')!r}, not 'object'")
    for path, node in nodes(schema):
        if "oneOf" in node:
            fail(f"{where} {path}", "oneOf (should be anyOf)")
        if node.get("format") in {"int8", "int16", "int32", "int64", "uint8", "uint16",
                                  "uint32", "uint64", "int", "uint", "float", "double"}:
            fail(f"{where} {path}", f"number format {node['format']}")
        kinds = node.get("type")
        kinds = kinds if isinstance(kinds, list) else [kinds]
        if "object" in kinds and "properties" not in node:
            fail(f"{where} {path}", "an object without properties")
        if "array" in kinds and "items" not in node:
            fail(f"{where} {path}", "an array without items")
        ref = node.get("$ref")
        if ref is not None and not ref.startswith("#/$defs/"):
            fail(f"{where} {path}", f"$ref {ref} is not into the root $defs")
        if ref is not None and ref.removeprefix("#/$defs/") not in schema.get("$defs", {}):
            fail(f"{where} {path}", f"dangling $ref {ref}")
        if "$defs" in node and path != "#":
            fail(f"{where} {path}", "$defs below the root")


def check_openai(dump, name):
    tools = dump["formats"][name]
    shape = ChatCompletionFunctionToolParam if name == "openai" else FunctionToolParam
    for tool in tools:
        pydantic.TypeAdapter(shape).validate_python(tool)
        function = tool["function"] if name == "openai" else tool
        where = f"{name} {function['name']}"
        if tool["type"] != "function":
            fail(where, "type is not function")
        parameters = function["parameters"]
        check_2020_12(where, parameters)
        common_rules(where, parameters)
        if function["strict"]:
            # The Agents SDK's own conversion leaves a schema that is already strict as it is.
            again = ensure_strict_json_schema(copy.deepcopy(parameters))
            if again != parameters:
                fail(where, "ensure_strict_json_schema changed it:\n"
                     f"ours:   {json.dumps(parameters, sort_keys=True)}\n"
                     f"theirs: {json.dumps(again, sort_keys=True)}")
            for path, node in nodes(parameters):
                unknown = set(node) - OPENAI_STRICT_KEYWORDS
                if unknown:
                    fail(f"{where} {path}", f"keywords strict mode lacks: {sorted(unknown)}")
                if not {"type", "anyOf", "enum", "const", "$ref"} & set(node):
                    fail(f"{where} {path}", "an untyped schema under strict mode")
                if "$ref" in node and len(node) > 1:
                    fail(f"{where} {path}", "a $ref with siblings under strict mode")
        tool_name = function["name"]
        if function["strict"] and tool_name in dump["strict_inputs"]:
            accepts(f"{where} (strict input)", parameters, dump["strict_inputs"][tool_name])
        elif tool_name in dump["plain_inputs"]:
            accepts(f"{where} (plain input)", parameters, dump["plain_inputs"][tool_name])
    print(f"ok {name}: {len(tools)} tools; strict ones unchanged by ensure_strict_json_schema")


def anthropic_survives(where, ours, theirs, notes):
    """`transform_schema` (what the SDK sends under strict tool use) keeps the meaning of ours:
    keywords it does not take move into the description as `{key: value}`, every object is
    closed (a map thereby loses its values: noted), and a `type` beside an `enum` goes."""
    if not isinstance(theirs, dict):
        fail(where, f"became {theirs!r}")
    moved = []
    for key, value in ours.items():
        if key == "description":
            continue
        if key in ("properties", "$defs"):
            if set(value) != set(theirs.get(key, {})):
                fail(where, f"{key} changed: {sorted(value)} -> {sorted(theirs.get(key, {}))}")
            for name in value:
                anthropic_survives(f"{where}/{key}/{name}", value[name], theirs[key][name], notes)
        elif key == "items":
            anthropic_survives(f"{where}/items", value, theirs.get("items"), notes)
        elif key in ("anyOf", "allOf"):
            if len(value) != len(theirs.get(key, [])):
                fail(where, f"{key} lost members")
            for i, (a, b) in enumerate(zip(value, theirs[key])):
                anthropic_survives(f"{where}/{key}/{i}", a, b, notes)
        elif key == "additionalProperties":
            if value is not False:
                notes.append(f"{where}: a map; strict tool use closes it")
        elif key == "type" and ("enum" in ours or "const" in ours) and "type" not in theirs:
            pass
        elif key in theirs:
            if theirs[key] != value:
                fail(where, f"{key} changed: {value!r} -> {theirs[key]!r}")
        else:
            moved.append(key)
    if "properties" in ours and theirs.get("additionalProperties") is not False:
        fail(where, "an object left open")
    description = ours.get("description")
    if moved:
        suffix = "{" + ", ".join(f"{key}: {ours[key]}" for key in moved) + "}"
        description = (description + "\n\n" if description is not None else "") + suffix
    if theirs.get("description") != description:
        fail(where, f"description {theirs.get('description')!r}, expected {description!r}")
    extra = set(theirs) - set(ours) - {"additionalProperties", "description"}
    if extra:
        fail(where, f"transform_schema added {sorted(extra)}")


def check_anthropic(dump):
    tools = dump["formats"]["anthropic"]
    notes = []
    for tool in tools:
        pydantic.TypeAdapter(ToolParam).validate_python(tool)
        where = f"anthropic {tool['name']}"
        schema = tool["input_schema"]
        check_2020_12(where, schema)
        common_rules(where, schema)
        for key in ("anyOf", "oneOf", "allOf"):
            if key in schema:
                fail(where, f"top-level {key}")
        anthropic_survives(where, schema, transform_schema(copy.deepcopy(schema)), notes)
        if tool["name"] in dump["plain_inputs"]:
            accepts(f"{where} (plain input)", schema, dump["plain_inputs"][tool["name"]])
    for note in notes:
        print(f"  note: {note}")
    print(f"ok anthropic: {len(tools)} tools; transform_schema keeps each one's meaning")


def check_gemini(dump):
    tools = dump["formats"]["gemini"]
    if len(tools) != 1:
        fail("gemini", f"{len(tools)} Tool objects, expected one")
    genai.Tool.model_validate(tools[0])
    declarations = tools[0]["functionDeclarations"]
    for declaration in declarations:
        genai.FunctionDeclaration.model_validate(declaration)
        where = f"gemini {declaration['name']}"
        schema = declaration["parametersJsonSchema"]
        check_2020_12(where, schema)
        common_rules(where, schema)
        # google-genai's JSONSchema model forbids keywords it does not know; a round trip
        # through it gives the schema back whole (a map's value schema is an opaque value to
        # it, so those are checked on their own).
        model = genai.JSONSchema.model_validate(schema)
        back = model.model_dump(mode="json", by_alias=True, exclude_none=True)
        if back != schema:
            fail(where, f"JSONSchema round trip changed it:\n{json.dumps(back, sort_keys=True)}")
        for path, node in nodes(schema):
            genai.JSONSchema.model_validate(node)
            if "const" in node:
                fail(f"{where} {path}", "const (should be a one-value enum)")
            if "$ref" in node and set(node) - {"$ref", "description"}:
                fail(f"{where} {path}", f"beside a $ref: {sorted(set(node) - {'$ref'})}")
            if "format" in node and node["format"] not in ("date-time", "date", "time"):
                fail(f"{where} {path}", f"string format {node['format']}")
        if declaration["name"] in dump["plain_inputs"]:
            accepts(f"{where} (plain input)", schema, dump["plain_inputs"][declaration["name"]])
    print(f"ok gemini: {len(declarations)} declarations; google-genai's models take each")


def check_mcp(dump):
    tools = dump["formats"]["mcp"]
    listed = mcp.ListToolsResult.model_validate({"tools": tools})
    pending = {"status": "pending_approval", "call_id": "call_x", "reason": "Over the limit."}
    for tool, model in zip(tools, listed.tools):
        where = f"mcp {tool['name']}"
        back = model.model_dump(mode="json", by_alias=True, exclude_none=True)
        if back != tool:
            fail(where, f"Tool round trip changed it:\n{json.dumps(back, sort_keys=True)}")
        if tool["name"] == "toolgate_await_call":
            fail(where, "listed; it lives on /mcp only")
        check_2020_12(where, tool["inputSchema"])
        common_rules(where, tool["inputSchema"])
        if "dev.toolgate/effect" not in tool.get("_meta", {}):
            fail(where, "no dev.toolgate/effect in _meta")
        if tool["name"] in dump["plain_inputs"]:
            accepts(f"{where} (plain input)", tool["inputSchema"], dump["plain_inputs"][tool["name"]])
        output = tool.get("outputSchema")
        if output is None:
            continue
        check_2020_12(f"{where} outputSchema", output)
        common_rules(f"{where} outputSchema", output, root_object=False)
        # What a client does with `structuredContent`: check it against `outputSchema`.
        accepts(f"{where} outputSchema (pending)", output, pending)
        if tool["name"] in dump["outputs"]:
            accepts(f"{where} outputSchema (output)", output, dump["outputs"][tool["name"]])
    print(f"ok mcp: {len(tools)} tools; the MCP SDK's Tool model takes each unchanged")


def main():
    dump = json.load(open(sys.argv[1]))
    check_openai(dump, "openai")
    check_openai(dump, "openai-responses")
    check_anthropic(dump)
    check_gemini(dump)
    check_mcp(dump)


if __name__ == "__main__":
    main()
