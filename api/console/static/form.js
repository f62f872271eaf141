// A start form generated from a capability's input JSON Schema (as capabilities.describe
// answers it): a field per property, typed by the schema (numbers, booleans, enums, text,
// JSON for the rest), its default and description shown, a sensitive member (the schema's
// x-majordomus-sensitive, format: password or writeOnly) as a password field.
"use strict";

export const REDACTED = "\u00abredacted\u00bb";

const el = (tag, attrs, ...kids) => {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k === "text") e.textContent = v; else e.setAttribute(k, v === true ? "" : v);
  }
  for (const k of kids) if (k !== null && k !== undefined) e.append(k);
  return e;
};

export function holdsSecret(value) {
  return JSON.stringify(value === undefined ? null : value).includes(REDACTED);
}

function resolve(root, node) {
  for (let n = 0; node && node.$ref && n < 16; n++) {
    const name = node.$ref.split("/").pop();
    node = ((root.$defs || root.definitions || {})[name]) || {};
  }
  return node || {};
}

// The schema of one member, a nullable type unwrapped: {kind, nullable, node}.
function shape(root, raw) {
  let node = resolve(root, raw);
  let nullable = false;
  const variants = node.anyOf || node.oneOf;
  if (variants) {
    const rest = variants.filter((v) => resolve(root, v).type !== "null");
    nullable = rest.length < variants.length;
    if (rest.length !== 1) return {kind: "json", nullable, node};
    const only = resolve(root, rest[0]);
    node = Object.assign({}, only, {default: node.default, description: node.description || only.description});
  }
  let types = Array.isArray(node.type) ? node.type : node.type ? [node.type] : [];
  if (types.includes("null")) { nullable = true; types = types.filter((t) => t !== "null"); }
  const kind = node.enum ? "enum" : types.length === 1 && ["string", "integer", "number", "boolean"].includes(types[0]) ? types[0] : "json";
  return {kind, nullable, node};
}

function sensitive(root, raw) {
  const node = resolve(root, raw);
  if (node["x-majordomus-sensitive"] || node.format === "password" || node.writeOnly) return true;
  return (node.anyOf || node.oneOf || []).some((v) => sensitive(root, v));
}

// Builds the form's fields into `container` and answers {collect()}: the input object, or an
// Error naming the field that does not read. `prefill` (a redacted input) replaces the
// defaults; a member that held a secret is left empty, to be typed again.
export function buildForm(container, schema, prefill) {
  container.replaceChildren();
  const props = schema.properties || {};
  const required = new Set(schema.required || []);
  const fields = [];
  for (const [name, raw] of Object.entries(props)) {
    const {kind, nullable, node} = shape(schema, raw);
    const secret = sensitive(schema, raw);
    const id = "field-" + name;
    const hintId = id + "-hint";
    const given = prefill && Object.prototype.hasOwnProperty.call(prefill, name) ? prefill[name] : undefined;
    const emptied = given !== undefined && holdsSecret(given);
    const value = emptied ? undefined : given !== undefined ? given : node.default !== undefined ? node.default : raw.default;
    const hints = [];
    if (node.description || raw.description) hints.push(node.description || raw.description);
    if (value === undefined && raw.default !== undefined && raw.default !== null) hints.push("default " + JSON.stringify(raw.default));
    if (emptied) hints.push("this held a secret: type it again");
    const common = {id, name, "aria-describedby": hints.length ? hintId : null, required: required.has(name) && kind !== "boolean"};
    let input;
    if (kind === "enum") {
      input = el("select", common);
      if (!required.has(name) || nullable) input.append(el("option", {value: "", text: "(default)"}));
      for (const option of node.enum) {
        if (option === null) continue;
        input.append(el("option", {value: JSON.stringify(option), text: String(option), selected: value === option}));
      }
    } else if (kind === "boolean" && !nullable) {
      input = el("input", Object.assign({}, common, {type: "checkbox", checked: value === true}));
    } else if (kind === "boolean") {
      input = el("select", common, el("option", {value: "", text: "(default)"}),
        el("option", {value: "true", text: "true", selected: value === true}),
        el("option", {value: "false", text: "false", selected: value === false}));
    } else if (kind === "integer" || kind === "number") {
      input = el("input", Object.assign({}, common, {type: "number", inputmode: kind === "integer" ? "numeric" : "decimal",
        step: kind === "integer" ? "1" : "any", min: node.minimum, max: node.maximum}));
      if (typeof value === "number") input.value = String(value);
    } else if (kind === "string") {
      input = el("input", Object.assign({}, common, {type: secret ? "password" : "text", autocomplete: secret ? "off" : null,
        minlength: node.minLength, maxlength: node.maxLength, pattern: node.pattern}));
      if (typeof value === "string") input.value = value;
    } else {
      input = el("textarea", Object.assign({}, common, {rows: 3, spellcheck: "false", placeholder: "JSON"}));
      if (value !== undefined && !(value === null && nullable && raw.default === null)) input.value = JSON.stringify(value, null, 2);
    }
    const label = el("label", {for: id}, el("code", {text: name}), required.has(name) ? el("span", {class: "req", text: " (required)"}) : null,
      secret ? el("span", {class: "tag", text: "secret"}) : null);
    container.append(el("div", {class: "field"}, label, input, hints.length ? el("small", {id: hintId, text: hints.join(" · ")}) : null));
    fields.push({name, kind, input, required: required.has(name)});
  }
  return {collect: () => collect(fields)};
}

function collect(fields) {
  const out = {};
  for (const {name, kind, input, required} of fields) {
    if (kind === "boolean" && input.type === "checkbox") { out[name] = input.checked; continue; }
    const text = input.value;
    if (text === "") {
      if (required && kind === "string") out[name] = "";
      continue; // the server's default
    }
    if (kind === "enum" || kind === "boolean") { out[name] = JSON.parse(text); continue; }
    if (kind === "integer" || kind === "number") {
      const n = Number(text);
      if (!Number.isFinite(n)) throw new Error(name + ": not a number");
      out[name] = n;
      continue;
    }
    if (kind === "string") { out[name] = text; continue; }
    try { out[name] = JSON.parse(text); } catch (e) { throw new Error(name + ": not valid JSON (" + e.message + ")"); }
  }
  return out;
}
