// pgsweep dashboard: the page refreshes itself (htmx swaps in the page's
// own new version), every few seconds as the reader chose, until paused.
// No inline script anywhere: the Content-Security-Policy forbids it.
(function () {
  "use strict";
  var every = document.getElementById("refresh-every");
  var pause = document.getElementById("refresh-pause");
  var timer = null;
  var stored = window.localStorage.getItem("pgsweep.refresh");
  every.value = stored || every.dataset.default || "5";
  if (!every.value) every.value = "5";
  function schedule() {
    if (timer) window.clearInterval(timer);
    timer = null;
    if (pause.getAttribute("aria-pressed") === "true") return;
    timer = window.setInterval(function () {
      if (document.hidden) return;
      htmx.ajax("GET", window.location.href, { target: "#page", select: "#page", swap: "outerHTML" });
    }, Number(every.value) * 1000);
  }
  every.addEventListener("change", function () {
    window.localStorage.setItem("pgsweep.refresh", every.value);
    schedule();
  });
  pause.addEventListener("click", function () {
    var paused = pause.getAttribute("aria-pressed") !== "true";
    pause.setAttribute("aria-pressed", String(paused));
    pause.textContent = paused ? "Resume" : "Pause";
    schedule();
  });
  schedule();
})();
