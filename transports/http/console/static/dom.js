// Building DOM without innerHTML: every text the gateway sends is set as text, never parsed.

/**
 * h("div.card.warn", {title: "x", onclick: fn, dataset: {id: "1"}}, "text", child, [more])
 * The first argument is a tag with optional .classes; attributes starting with "on" are
 * listeners; null, undefined and false children are skipped.
 */
export function h(spec, attrs, ...children) {
  const [tag, ...classes] = spec.split(".");
  const el = document.createElement(tag || "div");
  if (classes.length) el.className = classes.join(" ");
  if (attrs && (typeof attrs !== "object" || attrs instanceof Node || Array.isArray(attrs))) {
    children.unshift(attrs);
    attrs = null;
  }
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (key.startsWith("on") && typeof value === "function") el.addEventListener(key.slice(2), value);
    else if (key === "dataset") Object.assign(el.dataset, value);
    else if (key === "className") el.className = [el.className, value].filter(Boolean).join(" ");
    else if (value === true) el.setAttribute(key, "");
    else el.setAttribute(key, String(value));
  }
  append(el, children);
  return el;
}

export function append(el, children) {
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined || child === false) continue;
    el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return el;
}

/** Replace every child of ``el``. */
export function fill(el, ...children) {
  el.replaceChildren();
  return append(el, children);
}

/** A small inline SVG icon from the set below (stroke icons, 16px). */
export function icon(name, cls = "") {
  const ns = "http://www.w3.org/2000/svg";
  const svg = document.createElementNS(ns, "svg");
  svg.setAttribute("viewBox", "0 0 24 24");
  svg.setAttribute("aria-hidden", "true");
  svg.setAttribute("class", `icon ${cls}`.trim());
  for (const d of ICONS[name] || []) {
    const path = document.createElementNS(ns, "path");
    path.setAttribute("d", d);
    svg.append(path);
  }
  return svg;
}

const ICONS = {
  plus: ["M12 5v14", "M5 12h14"],
  stop: ["M7 7h10v10H7z"],
  send: ["M4 12l16-8-6 16-3-7z"],
  redo: ["M4 12a8 8 0 0 1 14-5.3L20 9", "M20 4v5h-5", "M20 12a8 8 0 0 1-14 5.3"],
  eraser: ["M4 20h16", "M7 16l-3-3 9-9 6 6-7 7H8z"],
  trash: ["M4 7h16", "M9 7V4h6v3", "M6 7l1 13h10l1-13"],
  tool: ["M14 6a4 4 0 0 0 5 5l-8 8a2 2 0 0 1-3-3z"],
  check: ["M5 12l5 5 9-10"],
  x: ["M6 6l12 12", "M18 6L6 18"],
  brain: ["M9 4a3 3 0 0 0-3 3 3 3 0 0 0-2 5 3 3 0 0 0 2 5 3 3 0 0 0 6 0V4a3 3 0 0 0-3 0z", "M15 4a3 3 0 0 1 3 3 3 3 0 0 1 2 5 3 3 0 0 1-2 5 3 3 0 0 1-6 0"],
  alert: ["M12 4l9 16H3z", "M12 10v4", "M12 17v.5"],
  terminal: ["M4 5h16v14H4z", "M8 10l3 2-3 2", "M13 15h3"],
  chat: ["M4 5h16v11H9l-5 4z"],
  bolt: ["M13 3L5 14h6l-1 7 8-11h-6z"],
  clock: ["M12 7v5l3 2", "M12 3a9 9 0 1 0 0 18 9 9 0 0 0 0-18z"],
};
