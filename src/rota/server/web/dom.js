// Building DOM nodes. Server text only ever goes in through textContent or setAttribute on a
// fixed list of safe attributes: never innerHTML, never an event-handler attribute.

const SVG_NS = "http://www.w3.org/2000/svg";
const SAFE_ATTR = /^(aria-[a-z-]+|data-[a-z-]+|role|id|class|for|type|name|value|title|href|tabindex|placeholder|autocomplete|inputmode|min|max|step|list|rows|cols|spellcheck|hidden|disabled|readonly|checked|selected|required|scope|colspan|lang|dir|open|method|novalidate|width|height|viewBox|d|x|y|x1|x2|y1|y2|cx|cy|r|points|fill|stroke|stroke-width|stroke-linejoin|stroke-linecap|stroke-dasharray|preserveAspectRatio|focusable|vector-effect|pattern|size|maxlength|autofocus|translate|target|rel)$/;

function apply(el, props) {
  for (const [key, value] of Object.entries(props || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (key === "class") {
      el.setAttribute("class", Array.isArray(value) ? value.filter(Boolean).join(" ") : value);
    } else if (key === "text") {
      el.textContent = String(value);
    } else if (key.startsWith("on") && typeof value === "function") {
      el.addEventListener(key.slice(2).toLowerCase(), value);
    } else if (key === "style" && typeof value === "object") {
      for (const [p, v] of Object.entries(value)) el.style.setProperty(p, v);
    } else if (SAFE_ATTR.test(key)) {
      if (key === "href" && !/^(#|\/|https?:)/.test(String(value))) {
        throw new Error(`refusing href ${value}`);
      }
      el.setAttribute(key, value === true ? "" : String(value));
    } else {
      throw new Error(`attribute not allowed: ${key}`);
    }
  }
}

function append(el, children) {
  for (const c of children.flat(Infinity)) {
    if (c === null || c === undefined || c === false) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return el;
}

/** h("div", {class: "x"}, "text", child...) -> an element; strings become text nodes. */
export function h(tag, props, ...children) {
  const el = document.createElement(tag);
  if (props && (props instanceof Node || typeof props !== "object" || Array.isArray(props))) {
    children.unshift(props);
    props = null;
  }
  apply(el, props);
  return append(el, children);
}

/** The same for SVG elements. */
export function s(tag, props, ...children) {
  const el = document.createElementNS(SVG_NS, tag);
  apply(el, props);
  return append(el, children);
}

/** Replace every child of el. */
export function replace(el, ...children) {
  el.replaceChildren();
  return append(el, children);
}

/**
 * Replace el's children only if the new ones differ (isEqualNode): a refresh that changes
 * nothing leaves the DOM, and so focus and text selection, alone.
 */
export function update(el, ...children) {
  const next = append(document.createElement("div"), children);
  const a = el.childNodes;
  const b = next.childNodes;
  let same = a.length === b.length;
  for (let i = 0; same && i < a.length; i += 1) same = a[i].isEqualNode(b[i]);
  if (!same) el.replaceChildren(...b);
  return el;
}

/** Text with each case-insensitive occurrence of `needle` wrapped in <mark>. */
export function highlighted(text, needle) {
  if (!needle) return [text];
  const out = [];
  const low = text.toLowerCase();
  const n = needle.toLowerCase();
  let i = 0;
  for (let j = low.indexOf(n); j !== -1; j = low.indexOf(n, i)) {
    if (j > i) out.push(text.slice(i, j));
    out.push(h("mark", null, text.slice(j, j + n.length)));
    i = j + n.length;
  }
  if (i < text.length) out.push(text.slice(i));
  return out;
}

let idCounter = 0;
export function uid(prefix = "id") {
  idCounter += 1;
  return `${prefix}-${idCounter}`;
}

/** A table that turns into a list of cards on a phone (app.css `table.stack`): each cell
 * gets its column's heading as its label. Returns the table. */
export function stacked(table) {
  const heads = [...table.querySelectorAll("thead th")].map((th) => th.textContent);
  for (const row of table.querySelectorAll("tbody tr")) {
    [...row.children].forEach((cell, i) => {
      if (heads[i]) cell.setAttribute("data-label", heads[i]);
    });
  }
  table.classList.add("stack");
  return table;
}
