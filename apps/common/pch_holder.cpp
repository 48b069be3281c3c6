// The translation unit that carries the apps' precompiled torch headers when apps/models, their usual holder,
// is not built (ATTN_BUILD_MODEL_APPS=OFF, apps/CMakeLists.txt).
namespace attn_apps {
int pch_holder() { return 0; }
}  // namespace attn_apps
