// The infrastructure test's own script (served from the repository, as the dashboard's are): a
// button that asks the server for the next count and shows it, and a CSV link.
document.addEventListener("DOMContentLoaded", () => {
  const button = document.getElementById("count");
  const shown = document.getElementById("shown");
  button.addEventListener("click", async () => {
    const answer = await fetch("/api/next", { method: "POST" });
    const body = await answer.json();
    shown.textContent = `count ${body.count}`;
    shown.dataset.count = String(body.count);
  });
});
