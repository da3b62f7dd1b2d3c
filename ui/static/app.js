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

  // Charts: the queue page carries its history as JSON (#chart-data); uPlot
  // draws it on load and after every refresh.
  var charts = [];
  function series(label, stroke) {
    return { label: label, stroke: stroke, width: 1.5 };
  }
  function draw() {
    charts.forEach(function (c) { c.destroy(); });
    charts = [];
    var el = document.getElementById("chart-data");
    if (!el) return;
    var d = JSON.parse(el.textContent);
    var opts = function (target, ss) {
      return {
        width: Math.max(280, target.clientWidth), height: 200,
        series: [{}].concat(ss), axes: [{}, { size: 60 }], legend: { live: false }
      };
    };
    var depth = document.getElementById("chart-depth");
    charts.push(new uPlot(opts(depth, [series("pending", "#2457a6"), series("in flight", "#2a9d8f"),
      series("failed", "#e9a23b"), series("dead", "#a4262c")]),
      [d.t, d.pending, d.in_flight, d.failed, d.dead], depth));
    var rate = document.getElementById("chart-rate");
    charts.push(new uPlot(opts(rate, [series("sent", "#2457a6"), series("completed", "#2a9d8f")]),
      [d.t, d.sent_per_s, d.completed_per_s], rate));
  }
  document.body.addEventListener("htmx:afterSettle", draw);
  draw();
})();
