// The API reference page: Swagger UI (vendored, see VENDOR.md) rendering the
// coordinator's own OpenAPI document. Nothing is fetched from another host:
// the validator badge is off and the spec comes from this origin.
window.addEventListener("DOMContentLoaded", () => {
  const token = (() => { try { return localStorage.getItem("lesfarm.token") || ""; } catch { return ""; } })();
  window.ui = SwaggerUIBundle({
    url: "/openapi.json",
    dom_id: "#swagger-ui",
    deepLinking: true,
    validatorUrl: null,
    persistAuthorization: false,
    tryItOutEnabled: false,
    displayRequestDuration: true,
    onComplete: () => {
      if (token) window.ui.preauthorizeApiKey("bearer", token);
    },
  });
});
