// The sign-in page of the test identity provider: a username, no password (the accounts are the
// fixed test users). Stable ids (#username, #sign-in, #cancel) so a headless browser or curl can
// complete it without reading the markup.

/** `text` safe inside HTML text and attribute values. */
export function escapeHtml(text) {
  return String(text).replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);
}

/** Writes the login form for interaction `uid`; `username` set means it was not a known user. */
export function renderLogin(res, status, { uid, client, users, username }) {
  const error =
    username === undefined
      ? ""
      : `<p id="error" role="alert">Unknown user ${escapeHtml(username)}.</p>`;
  const names = users.map((user) => `<code>${escapeHtml(user.username)}</code>`).join(", ");
  res.writeHead(status, {
    "content-type": "text/html; charset=utf-8",
    "cache-control": "no-store",
  });
  res.end(`<!doctype html>
<html lang="en">
<head><meta charset="utf-8"><title>Sign in: test identity provider</title></head>
<body>
<h1>Sign in</h1>
<p>to continue to <strong>${escapeHtml(client)}</strong>.</p>
${error}
<form method="post" action="/interaction/${escapeHtml(uid)}/login">
  <label for="username">Username</label>
  <input id="username" name="username" autocomplete="username" autofocus required>
  <button id="sign-in" type="submit">Sign in</button>
</form>
<form method="post" action="/interaction/${escapeHtml(uid)}/abort">
  <button id="cancel" type="submit">Cancel</button>
</form>
<p>Test users: ${names}.</p>
</body>
</html>
`);
}
