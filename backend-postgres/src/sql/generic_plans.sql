SET plan_cache_mode = force_generic_plan
