// A lesson preview built from the lesson's XML with createElement only: known elements
// become their HTML counterparts, anything else its text. No markup from the document
// reaches innerHTML.
const SAME = new Set(["h1", "h2", "h3", "p", "ul", "ol", "li", "strong", "em", "b", "i", "table", "tr", "td", "th"]);

function convert(node) {
  if (node.nodeType === Node.TEXT_NODE) return document.createTextNode(node.nodeValue);
  if (node.nodeType !== Node.ELEMENT_NODE) return document.createTextNode("");
  const name = node.localName;
  let out;
  if (SAME.has(name)) {
    out = document.createElement(name === "h1" ? "h3" : name === "h2" ? "h4" : name === "h3" ? "h5" : name);
  } else if (name === "blank") {
    out = document.createElement("span");
    out.className = "blank";
    out.textContent = "_____";
    return out;
  } else if (name === "writing-area") {
    out = document.createElement("div");
    out.className = "writing-area";
    out.textContent = "(writing space)";
    return out;
  } else if (name === "note") {
    out = document.createElement("aside");
    out.className = "note";
  } else if (name === "exercise" || name === "section" || name === "lesson") {
    out = document.createElement("section");
    out.className = name;
  } else {
    out = document.createElement("span");
  }
  for (const child of node.childNodes) out.append(convert(child));
  return out;
}

/** The lesson `xml` as preview elements (its text only if it does not parse). */
export function lessonPreview(xml) {
  const parsed = new DOMParser().parseFromString(xml || "<lesson/>", "application/xml");
  if (parsed.getElementsByTagName("parsererror").length) {
    const pre = document.createElement("pre");
    pre.textContent = xml;
    return pre;
  }
  return convert(parsed.documentElement);
}
