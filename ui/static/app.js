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

  // Charts: a page carries its charts as JSON (#chart-data: a list of
  // {id, labels, data}, data in uPlot's column form); uPlot draws each in
  // the element of its id, on load and after every refresh.
  var charts = [];
  var colors = ["#2457a6", "#2a9d8f", "#e9a23b", "#a4262c"];
  function draw() {
    charts.forEach(function (c) { c.destroy(); });
    charts = [];
    var el = document.getElementById("chart-data");
    if (!el) return;
    JSON.parse(el.textContent).forEach(function (c) {
      var target = document.getElementById(c.id);
      if (!target) return;
      var series = c.labels.map(function (label, i) {
        return { label: label, stroke: colors[i % colors.length], width: 1.5 };
      });
      charts.push(new uPlot({
        width: Math.max(280, target.clientWidth), height: 200,
        series: [{}].concat(series), axes: [{}, { size: 60 }], legend: { live: false }
      }, c.data, target));
    });
  }
  document.body.addEventListener("htmx:afterSettle", draw);
  draw();
})();
