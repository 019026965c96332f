// toolgate inbox: the few things a page does by itself. No framework, no build step.
// - The queue refreshes its list when approvals arrive or are decided elsewhere (the event
//   stream), without touching anything else on the page: a filter being chosen stays chosen;
//   and once when the stream opens, for what arrived before it did.
// - A call's page says when the call was decided elsewhere, without touching its forms.
// - Array fields get rows added and removed.
// - Times, written by the server in UTC, are shown in the viewer's local time (UTC stays on
//   hover, in each <time>'s title; without script, the UTC text stays).
"use strict";

(function () {
  const TYPES = [
    "call.suspended", "call.completed", "call.failed", "call.rejected",
    "call.expired", "call.interrupted", "call.needs_reconciliation",
  ];

  function listen(url, onEvent, onOpen) {
    if (!window.EventSource) return;
    const source = new EventSource(url);
    // A stream without a cursor starts with the next change, fixed before it opens: what changed
    // between the page's making and the stream's opening (or while it reconnected) is caught up
    // once it is open.
    if (onOpen) source.addEventListener("open", onOpen);
    for (const type of TYPES) {
      source.addEventListener(type, (event) => {
        let data = null;
        try { data = JSON.parse(event.data); } catch (_) { return; }
        onEvent(type, data);
      });
    }
  }

  function say(text) {
    const status = document.getElementById("live-status");
    if (status) status.textContent = text;
  }

  // Times in the viewer's time zone: the time of day alone when it is today, else the date too.
  function localTimes(root) {
    const today = new Date().toDateString();
    for (const el of root.querySelectorAll("time[datetime]")) {
      const at = new Date(el.getAttribute("datetime"));
      if (isNaN(at.getTime())) continue;
      const time = at.toLocaleTimeString([], { hour: "2-digit", minute: "2-digit" });
      el.textContent = at.toDateString() === today
        ? time
        : `${at.toLocaleDateString([], { year: "numeric", month: "short", day: "numeric" })} ${time}`;
    }
  }
  localTimes(document);

  // The queue: swap in a fresh list, at most a few times a second.
  const queue = document.querySelector("[data-live-queue]");
  if (queue) {
    let timer = null;
    const refresh = (announce) => {
      timer = null;
      fetch(queue.dataset.fragment, { credentials: "same-origin", headers: { "Accept": "text/html" } })
        .then((response) => {
          if (response.status === 401) { say("Your session has ended: reload the page to sign in again."); return null; }
          return response.ok ? response.text() : null;
        })
        .then((html) => {
          if (html === null) return;
          const focused = document.activeElement && queue.contains(document.activeElement)
            ? document.activeElement.getAttribute("href") : null;
          queue.innerHTML = html;
          localTimes(queue);
          if (focused) {
            const again = queue.querySelector(`a[href="${CSS.escape(focused)}"]`);
            if (again) again.focus();
          }
          if (announce) say("The list was updated.");
        })
        .catch(() => {});
    };
    listen(queue.dataset.events, () => {
      if (timer === null) timer = setTimeout(() => refresh(true), 150);
    }, () => refresh(false));
  }

  // One call: say so when it changes elsewhere; leave the forms as they are.
  const watched = document.querySelector("[data-call]");
  if (watched) {
    listen(watched.dataset.events, (type, data) => {
      if (!data.call || data.call.call_id !== watched.dataset.call) return;
      const status = data.call.status;
      if (status === watched.dataset.status) return;
      say(`This call is ${status.replace(/_/g, " ")} now (decided or changed elsewhere). Reload the page to see its history.`);
    });
  }

  // Array rows. A row template names its fields with `-` for the row's index; a new row gets
  // the next free index.
  function renumber(root, from, to) {
    const attrs = ["name", "id", "for", "aria-describedby", "data-add-row", "data-name"];
    const walk = (node) => {
      for (const el of node.querySelectorAll("*")) {
        for (const attr of attrs) {
          const value = el.getAttribute(attr);
          if (value !== null && value.includes(from)) el.setAttribute(attr, value.split(from).join(to));
        }
        if (el.tagName === "TEMPLATE") walk(el.content);
      }
    };
    walk(root);
  }

  document.addEventListener("click", (event) => {
    const add = event.target.closest("[data-add-row]");
    if (add) {
      const template = document.getElementById(add.dataset.addRow);
      const rows = add.parentElement.querySelector("[data-rows]");
      if (!template || !rows) return;
      const name = add.dataset.name;
      const taken = new Set();
      for (const el of add.parentElement.querySelectorAll("[name]")) {
        const rest = el.getAttribute("name").slice(name.length + 1);
        if (el.getAttribute("name").startsWith(name + "/")) taken.add(rest.split("/")[0]);
      }
      let index = 0;
      while (taken.has(String(index))) index += 1;
      const fragment = template.content.cloneNode(true);
      const ids = template.id.replace(/-template$/, "");
      renumber(fragment, name + "/-", name + "/" + index);
      renumber(fragment, ids + "/-", ids + "/" + index);
      const row = fragment.querySelector("[data-row]");
      rows.appendChild(fragment);
      const first = row && row.querySelector("input, select, textarea");
      if (first) first.focus();
      return;
    }
    const remove = event.target.closest("[data-remove-row]");
    if (remove) {
      const row = remove.closest("[data-row]");
      const group = row && row.closest("fieldset");
      if (row) row.remove();
      const next = group && group.querySelector("[data-add-row]");
      if (next) next.focus();
    }
  });

  // A refused answer: bring its summary into view.
  const problems = document.querySelector(".problems");
  if (problems) problems.focus();
})();
