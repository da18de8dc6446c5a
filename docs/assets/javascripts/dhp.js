/* Wide tables and outputs: a box wider than the column scrolls inside itself (Material's table wrapper, a notebook's
   output); this marks every such box with dhp-scrolls, which the site's CSS gives a visible scrollbar, a shadow on
   the side with more columns and a one-line hint, so a reader sees that columns continue. scripts/check_site.py
   fails a table that is cut (no scroll box) or that scrolls without this mark. */
(function () {
  var BOXES = ".md-typeset__scrollwrap, .md-typeset table:not([class]), .jupyter-wrapper .jp-OutputArea-output, " +
              ".jupyter-wrapper .jp-RenderedHTMLCommon";
  function mark() {
    document.querySelectorAll(BOXES).forEach(function (box) {
      var wide = box.scrollWidth > box.clientWidth + 1;
      var cs = getComputedStyle(box);
      box.classList.toggle("dhp-scrolls", wide && (cs.overflowX === "auto" || cs.overflowX === "scroll"));
      if (wide) box.classList.toggle("dhp-scrolled-end", box.scrollLeft + box.clientWidth >= box.scrollWidth - 1);
    });
  }
  document.addEventListener("scroll", function (e) {
    var box = e.target;
    if (box.classList && box.classList.contains("dhp-scrolls"))
      box.classList.toggle("dhp-scrolled-end", box.scrollLeft + box.clientWidth >= box.scrollWidth - 1);
  }, true);
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", mark); else mark();
  window.addEventListener("load", mark);
  window.addEventListener("resize", mark);
})();

/* The lightbox (glightbox) fits a figure into the window: a tall figure (HANNA's views, 1854 x 4540 px) came out
   370 px wide, unreadable. Show every figure as wide as the window allows, up to its own width, and let a tall one
   scroll vertically inside the lightbox instead. */
document.addEventListener("load", function (e) {
  var img = e.target;
  if (!img || img.tagName !== "IMG" || !img.closest || !img.closest(".gslide-image")) return;
  var width = Math.min(img.naturalWidth, Math.floor(window.innerWidth * 0.96));
  img.style.setProperty("width", width + "px", "important");
  img.style.setProperty("max-width", "none", "important");
  img.style.setProperty("max-height", "none", "important");
  img.style.setProperty("height", "auto", "important");
}, true);
