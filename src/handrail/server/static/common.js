// handrail web inbox: what every page shares (keyboard, help, live events, announcements).
// Our own code, no libraries. Values from the service are set as text, never as markup.

const keys = new Map();

/** Run `handler(event)` for a key pressed outside of a text field. */
export function onKey(key, handler) {
  keys.set(key, handler);
}

function typing(target) {
  if (!(target instanceof Element)) return false;
  return Boolean(target.closest("input, textarea, select, [contenteditable='true']"));
}

function toggleHelp() {
  const help = document.getElementById("help");
  if (!help) return;
  if (help.open) help.close();
  else help.showModal();
}

document.addEventListener("keydown", (event) => {
  if (event.defaultPrevented || event.ctrlKey || event.metaKey || event.altKey) return;
  if (typing(event.target)) return;
  if (event.key === "?") {
    event.preventDefault();
    toggleHelp();
    return;
  }
  const help = document.getElementById("help");
  if (help && help.open) return;
  const handler = keys.get(event.key);
  if (handler) {
    handler(event);
    return;
  }
  const link = document.querySelector(`a[data-key="${event.key}"]`);
  if (link && (event.key === "j" || event.key === "k")) {
    event.preventDefault();
    link.click();
  }
});

for (const button of document.querySelectorAll("[data-help]")) {
  button.addEventListener("click", toggleHelp);
}

/** Say `text` to screen readers (the page's polite live region). */
export function announce(text) {
  const region = document.getElementById("announce");
  if (!region) return;
  region.textContent = "";
  window.setTimeout(() => {
    region.textContent = text;
  }, 50);
}

/**
 * Follow the live inbox (`/handrail/events`) from event `after` on: `handlers` maps an event
 * kind to a function of its data. Reconnects by itself from the last event seen.
 */
export function follow(after, handlers) {
  let last = Number(after) || 0;
  let source = null;
  let closed = false;
  function open() {
    source = new EventSource(`/handrail/events?after=${last}`);
    for (const [kind, handler] of Object.entries(handlers)) {
      source.addEventListener(kind, (event) => {
        const id = Number(event.lastEventId);
        if (id && id <= last) return;
        if (id) last = id;
        let data;
        try {
          data = JSON.parse(event.data);
        } catch {
          return;
        }
        handler(data);
      });
    }
    source.onerror = () => {
      source.close();
      if (!closed) window.setTimeout(open, 1000);
    };
    if (handlers.open) source.onopen = handlers.open;
  }
  open();
  return {
    close() {
      closed = true;
      if (source) source.close();
    },
  };
}

/** How long ago, as the server writes it: "12 s", "3 min", "2 h", "4 d". */
export function age(iso) {
  const seconds = Math.max(0, Math.floor((Date.now() - Date.parse(iso)) / 1000));
  for (const [size, unit] of [[86400, "d"], [3600, "h"], [60, "min"]]) {
    if (seconds >= size) return `${Math.floor(seconds / size)} ${unit}`;
  }
  return `${seconds} s`;
}

/** Time left until `iso`, as the server writes it: "expires in 43 min", or "expired". */
export function timeLeft(iso) {
  const left = Math.floor((Date.parse(iso) - Date.now()) / 1000);
  if (!(left > 0)) return "expired";
  if (left < 60) return `expires in ${left} s`;
  if (left < 3600) return `expires in ${Math.floor(left / 60)} min`;
  if (left < 86400) {
    const hours = Math.floor(left / 3600);
    const minutes = Math.floor((left % 3600) / 60);
    return `expires in ${hours} h${minutes ? ` ${minutes} min` : ""}`;
  }
  const days = Math.floor(left / 86400);
  const hours = Math.floor((left % 86400) / 3600);
  return `expires in ${days} d${hours ? ` ${hours} h` : ""}`;
}

function refreshAges() {
  for (const time of document.querySelectorAll("time[data-age]")) {
    const iso = time.getAttribute("datetime");
    if (iso) time.textContent = age(iso);
  }
  for (const time of document.querySelectorAll("time[data-expires]")) {
    const iso = time.getAttribute("datetime");
    if (!iso) continue;
    time.textContent = timeLeft(iso);
    const marker = time.closest(".marker");
    if (marker && time.textContent === "expired") marker.classList.add("expired");
  }
}
window.setInterval(refreshAges, 30000);
