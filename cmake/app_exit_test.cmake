# attn_app_exit_test(NAME APP EXPECT [SETUP command] [ARGS arg...] [SHELL_ARGS words])
#
# A CTest test that runs the app target APP with ARGS and passes when its output (standard output and error
# together), followed by a line "exit status N", matches the regular expression EXPECT: so one pattern checks
# both what the app said and how it ended (2 for a usage error, 1 for a failure). SETUP, a shell command, runs
# first and must succeed. SHELL_ARGS follow ARGS in the shell's own words, for what a list of arguments cannot
# carry: an empty argument (''), a redirection, a command's output ("$(...)").
function(attn_app_exit_test name app expect)
  cmake_parse_arguments(PARSE_ARGV 3 arg "" "SETUP;SHELL_ARGS" "ARGS")
  if(arg_UNPARSED_ARGUMENTS)
    message(FATAL_ERROR "attn_app_exit_test(${name}): unexpected arguments ${arg_UNPARSED_ARGUMENTS}")
  endif()
  set(setup "")
  if(arg_SETUP)
    set(setup "${arg_SETUP} && ")
  endif()
  add_test(NAME ${name}
    COMMAND sh -c "${setup}\"$@\" ${arg_SHELL_ARGS}; echo \"exit status $?\"" sh $<TARGET_FILE:${app}> ${arg_ARGS})
  set_tests_properties(${name} PROPERTIES TIMEOUT 60 PASS_REGULAR_EXPRESSION "${expect}")
endfunction()
