/* gpufleet dashboard: a tiny subset of htmx's attributes (hx-get, hx-post, hx-target, hx-swap,
   hx-trigger, hx-push-url), written here so that nothing comes from a CDN. Triggers: click, change,
   input, submit, toggle (a <details> opening), load, "every Ns"; "once" and "delay:Nms" modifiers.
   A request sends the header HX-Request: true; the answer's HTML replaces the target's inner HTML
   (hx-swap="outerHTML": the target itself). While a request runs the element has class hx-busy. */
(function () {
  "use strict";
  function target(el) {
    var sel = el.getAttribute("hx-target");
    if (!sel || sel === "this") return el;
    if (sel.indexOf("find ") === 0) return el.querySelector(sel.slice(5));
    if (sel.indexOf("closest ") === 0) return el.closest(sel.slice(8));
    return document.querySelector(sel);
  }
  function formOf(el) { return el.tagName === "FORM" ? el : el.form || el.closest("form"); }
  function request(el) {
    var method = el.hasAttribute("hx-post") ? "POST" : "GET";
    var url = el.getAttribute(method === "POST" ? "hx-post" : "hx-get");
    var form = formOf(el), body = null;
    if (form) {
      var data = new URLSearchParams(new FormData(form));
      if (method === "GET") { url += (url.indexOf("?") < 0 ? "?" : "&") + data.toString(); }
      else { body = data; }
    }
    var dest = target(el);
    if (!dest) return;
    el.classList.add("hx-busy");
    fetch(url, {method: method, body: body, headers: {"HX-Request": "true"}, credentials: "same-origin"})
      .then(function (r) { return r.text().then(function (t) { return {ok: r.ok, status: r.status, text: t}; }); })
      .then(function (r) {
        el.classList.remove("hx-busy");
        var html = r.ok ? r.text : '<p class="error">Error ' + r.status + ": " + r.text.replace(/</g, "&lt;") + "</p>";
        if (el.getAttribute("hx-swap") === "outerHTML") {
          var box = document.createElement("div");
          box.innerHTML = html;
          var parent = dest.parentNode, nodes = Array.prototype.slice.call(box.childNodes);
          nodes.forEach(function (n) { parent.insertBefore(n, dest); });
          parent.removeChild(dest);
          nodes.forEach(function (n) { if (n.nodeType === 1) process(n); });
        } else {
          dest.innerHTML = html;
          process(dest);
        }
        if (el.hasAttribute("hx-push-url") && method === "GET") history.replaceState(null, "", url);
      })
      .catch(function (e) { el.classList.remove("hx-busy"); dest.textContent = "Request failed: " + e; });
  }
  function bind(el) {
    if (el.__hx) return;
    el.__hx = true;
    var spec = el.getAttribute("hx-trigger") ||
      (el.tagName === "FORM" ? "submit" : /^(INPUT|SELECT|TEXTAREA)$/.test(el.tagName) ? "change" :
       el.tagName === "DETAILS" ? "toggle" : "click");
    spec.split(",").forEach(function (part) {
      var words = part.trim().split(/\s+/), ev = words[0], once = words.indexOf("once") >= 0, delay = 0, timer = null;
      words.forEach(function (w) { if (w.indexOf("delay:") === 0) delay = parseInt(w.slice(6), 10) || 0; });
      if (ev === "load") { setTimeout(function () { request(el); }, delay); return; }
      if (ev === "every") {
        var ms = parseFloat(words[1]) * (words[1].slice(-2) === "ms" ? 1 : 1000);
        var tick = function () { if (document.body.contains(el)) { request(el); setTimeout(tick, ms); } };
        setTimeout(tick, ms);
        return;
      }
      var fired = false;
      el.addEventListener(ev, function (e) {
        if (ev === "submit" || (ev === "click" && el.tagName === "A")) e.preventDefault();
        if (ev === "toggle" && !el.open) return;
        if (once && fired) return;
        fired = true;
        if (timer) clearTimeout(timer);
        if (delay) { timer = setTimeout(function () { request(el); }, delay); } else { request(el); }
      });
    });
  }
  function process(root) {
    if (root.matches && root.matches("[hx-get],[hx-post]")) bind(root);
    root.querySelectorAll("[hx-get],[hx-post]").forEach(bind);
  }
  document.addEventListener("DOMContentLoaded", function () { process(document.body); });
})();
