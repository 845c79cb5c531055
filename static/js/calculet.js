// Live character counts beside fields with a length limit (templates/char-count.html). The server renders
// the count, so pages read the same without JavaScript; this only keeps it current while typing.
(function () {
  function update(counter) {
    const field = document.getElementById(counter.dataset.for);
    if (!field) return;
    const used = Array.from(field.value).length; // characters, as the server counts them
    const limit = Number(counter.dataset.limit);
    counter.textContent = used + "/" + limit;
    counter.classList.toggle("char-count-full", used >= limit);
  }
  document.addEventListener("input", function (event) {
    const counter = event.target.id && document.getElementById(event.target.id + "-count");
    if (counter && counter.classList.contains("char-count")) update(counter);
  });
  // A page restored from the back/forward cache keeps what was typed: count it again.
  window.addEventListener("pageshow", function () {
    document.querySelectorAll(".char-count").forEach(update);
  });
})();
