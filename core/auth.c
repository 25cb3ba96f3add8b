/* placeholder */ typedef int core_placeholder_auth;
