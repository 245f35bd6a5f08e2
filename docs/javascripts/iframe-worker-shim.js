/*
 * The site's search opened from disk (file://). Material's search runs in a Web Worker, and
 * browsers refuse `new Worker()` for a page opened from a file. For such a page this runs the
 * worker's script in a hidden iframe instead, with the Worker interface the theme uses
 * (postMessage, addEventListener, onmessage, terminate). Material's offline plugin would
 * otherwise load a shim for this from unpkg.com; this one ships with the site (mkdocs.yml
 * `extra.polyfills`: a name containing "iframe-worker" stops the plugin from adding its own).
 * Served over http(s), nothing changes.
 */
(function () {
  "use strict";
  if (location.protocol !== "file:") return;

  function FrameWorker(url) {
    var worker = this;
    var frame = document.createElement("iframe");
    var pending = [];
    var ready = false;
    worker.onmessage = null;
    worker.onerror = null;
    worker._target = document.createElement("span");
    frame.hidden = true;
    frame.setAttribute("aria-hidden", "true");
    frame.title = "search";
    document.body.appendChild(frame);
    var inner = frame.contentWindow;
    // The worker's side: what it posts reaches this object's listeners.
    inner.postMessage = function (data) {
      var event = new MessageEvent("message", { data: data });
      if (typeof worker.onmessage === "function") worker.onmessage(event);
      worker._target.dispatchEvent(event);
    };
    inner.importScripts = function () {
      throw new Error("importScripts is not available to a worker of a page opened from disk");
    };
    worker._deliver = function (data) {
      inner.dispatchEvent(new inner.MessageEvent("message", { data: data }));
    };
    var script = inner.document.createElement("script");
    script.src = new URL(url, document.baseURI).href;
    script.onload = function () {
      ready = true;
      pending.splice(0).forEach(worker._deliver);
    };
    script.onerror = function (error) {
      if (typeof worker.onerror === "function") worker.onerror(error);
    };
    worker._send = function (data) {
      if (ready) worker._deliver(data);
      else pending.push(data);
    };
    worker._frame = frame;
    inner.document.head.appendChild(script);
  }

  FrameWorker.prototype.postMessage = function (data) {
    this._send(data);
  };
  FrameWorker.prototype.addEventListener = function (type, listener, options) {
    this._target.addEventListener(type, listener, options);
  };
  FrameWorker.prototype.removeEventListener = function (type, listener, options) {
    this._target.removeEventListener(type, listener, options);
  };
  FrameWorker.prototype.terminate = function () {
    this._frame.remove();
  };

  window.Worker = FrameWorker;
})();
