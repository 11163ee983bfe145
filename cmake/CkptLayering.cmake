# Writes <build>/layering/targets.txt: one line per target of this project,
# "<target>\t<what it links>" (LINK_LIBRARIES, or INTERFACE_LINK_LIBRARIES for
# interface libraries). tests/layering/check_layering.py checks these links
# against the Layers table of docs/DESIGN.md (ctest "layering").
function(ckpt_collect_targets dir out_var)
  get_property(targets DIRECTORY ${dir} PROPERTY BUILDSYSTEM_TARGETS)
  get_property(subdirs DIRECTORY ${dir} PROPERTY SUBDIRECTORIES)
  foreach(sub ${subdirs})
    ckpt_collect_targets(${sub} sub_targets)
    list(APPEND targets ${sub_targets})
  endforeach()
  set(${out_var} ${targets} PARENT_SCOPE)
endfunction()

function(ckpt_write_layering_targets)
  ckpt_collect_targets(${PROJECT_SOURCE_DIR} all_targets)
  set(text "")
  foreach(t ${all_targets})
    get_target_property(type ${t} TYPE)
    if(type STREQUAL "INTERFACE_LIBRARY")
      get_target_property(links ${t} INTERFACE_LINK_LIBRARIES)
    else()
      get_target_property(links ${t} LINK_LIBRARIES)
    endif()
    if(NOT links)
      set(links "")
    endif()
    string(APPEND text "${t}\t${links}\n")
  endforeach()
  # Raw link items (generator expressions unevaluated); rewritten only on change.
  file(WRITE ${PROJECT_BINARY_DIR}/layering/targets.txt.new "${text}")
  configure_file(${PROJECT_BINARY_DIR}/layering/targets.txt.new
                 ${PROJECT_BINARY_DIR}/layering/targets.txt COPYONLY)
endfunction()
