// Times in the viewer's zone: every <time datetime> shows its instant in
// the browser's zone; its title keeps the UTC instant (shown on hover).
(function () {
  "use strict";
  var format = new Intl.DateTimeFormat(undefined, {
    year: "numeric", month: "short", day: "2-digit",
    hour: "2-digit", minute: "2-digit", second: "2-digit", timeZoneName: "short"
  });
  function localize(root) {
    var times = (root || document).querySelectorAll("time[datetime]");
    for (var i = 0; i < times.length; i++) {
      var t = times[i];
      var when = new Date(t.getAttribute("datetime"));
      if (!isNaN(when.getTime())) {
        t.textContent = format.format(when);
        t.setAttribute("title", when.toISOString().replace(".000Z", "Z") + " (UTC)");
      }
    }
  }
  document.addEventListener("DOMContentLoaded", function () { localize(document); });
  // Parts that htmx swaps in (a job's state while it runs).
  document.addEventListener("htmx:afterSettle", function (e) { localize(e.target); });
})();
