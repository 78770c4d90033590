// The page after a decision: what ran and its result appear by themselves (live events), then
// the next review (j).
import { announce, follow } from "./common.js";

const section = document.getElementById("outcome");

function settled() {
  const part = section.querySelector("[data-outcome]");
  return part && part.dataset.settled === "true";
}

let asking = false;
let again = false;
async function refresh() {
  if (asking) {
    again = true;
    return;
  }
  asking = true;
  try {
    const reply = await fetch(section.dataset.url, { credentials: "same-origin" });
    if (reply.status !== 200) return;
    // Made by the server's template, every value escaped there.
    const template = document.createElement("template");
    template.innerHTML = (await reply.text()).trim();
    const part = template.content.querySelector("[data-outcome]");
    if (!part) return;
    section.querySelector("[data-outcome]").replaceWith(part);
    if (settled()) {
      announce("The run finished: what ran and its result are shown.");
      stop();
    }
  } finally {
    asking = false;
    if (again && !settled()) {
      again = false;
      refresh();
    }
  }
}

let live = null;
let timer = null;
function stop() {
  if (live) live.close();
  if (timer) window.clearInterval(timer);
}

if (!settled()) {
  const mine = (event) => {
    if (event.thread_id === section.dataset.thread) refresh();
  };
  live = follow(section.dataset.after, {
    "run.finished": mine,
    "review.requested": mine,
    "review.decided": mine,
    open: () => refresh(),
  });
  timer = window.setInterval(refresh, 5000); // in case a run elsewhere sends no event
}
document.body.dataset.ready = "true"; // the page's script has run (tests wait for it)
