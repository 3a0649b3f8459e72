// jobledger dashboard: small progressive enhancements (every page works without them).
(function () {
  "use strict";

  // Dead letters: a "select all" box, and a button that says how many are selected.
  function syncSelection(form) {
    const boxes = form.querySelectorAll("input[type=checkbox][name=id]");
    const chosen = Array.prototype.filter.call(boxes, function (box) { return box.checked; });
    const all = form.querySelector("input[type=checkbox][data-select-all]");
    if (all) {
      all.checked = boxes.length > 0 && chosen.length === boxes.length;
      all.indeterminate = chosen.length > 0 && chosen.length < boxes.length;
    }
    const button = form.querySelector("button[data-count-label]");
    if (button) {
      button.disabled = chosen.length === 0;
      button.textContent = button.getAttribute("data-count-label").replace("{n}", String(chosen.length));
    }
  }

  document.addEventListener("change", function (event) {
    const target = event.target;
    if (!(target instanceof HTMLInputElement) || target.type !== "checkbox") return;
    const form = target.form;
    if (!form) return;
    if (target.hasAttribute("data-select-all")) {
      form.querySelectorAll("input[type=checkbox][name=id]").forEach(function (box) {
        box.checked = target.checked;
      });
    }
    syncSelection(form);
  });

  // Forms that change things ask first when they carry data-confirm.
  document.addEventListener("submit", function (event) {
    const form = event.target;
    if (!(form instanceof HTMLFormElement)) return;
    const question = form.getAttribute("data-confirm");
    if (question && !window.confirm(question)) event.preventDefault();
  });

  // The sign-in link `jobledger web` prints carries its token in the URL fragment
  // (/login#token=…), which browsers never send to the server, so no access log sees it.
  // Take it out of the address bar (and history) first, then post it with the form.
  function signInFromFragment() {
    const form = document.querySelector("form[data-fragment-login]");
    const match = /^#token=([^&]+)/.exec(window.location.hash);
    if (!form || !match) return;
    window.history.replaceState(null, "", window.location.pathname + window.location.search);
    const field = form.querySelector("input[name=token]");
    if (!field) return;
    try {
      field.value = decodeURIComponent(match[1]);
    } catch (error) {
      return; // a mangled link: leave the form for a person to fill in
    }
    form.submit();
  }

  document.addEventListener("DOMContentLoaded", function () {
    document.querySelectorAll("form[data-selection]").forEach(syncSelection);
    signInFromFragment();
  });
})();
